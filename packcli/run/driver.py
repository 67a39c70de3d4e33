"""The one driver of every run: set up -> plan -> engine -> merge -> publish. The only place that knows the order.

A plain run is one job on the in-process engine, its shards ``shard-NNNNN.arrow``, in a fresh staging directory;
a partitioned run (``--partitions``) is one job per partition of a plan made from the inputs alone, on worker
processes or Ray, in a staging directory that survives a failed or killed run (``.OUT.packcli-resume``) so that a
rerun with the same fingerprint reuses the committed partitions. Either way each job commits a record, the merge
reads the records, and the manifest is written last and the whole directory moved into place: an interrupted run
never leaves an output that looks complete, and an existing output stays intact until then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from packcli.encode import cache
from packcli.engines import Engine
from packcli.errors import PackcliError, UsageError
from packcli.format.manifest import read_manifest, write_manifest
from packcli.options import PackOptions
from packcli.read.inputs import Spool
from packcli.run.local import Job, JobResult, ShippedTokenizer, partition_seed, run_job, run_local, start_worker
from packcli.run.merge import (
    PARTITIONING_WARNING,
    input_facts,
    merge_parts,
    merged_backend,
    packing_gap,
    run_facts,
)
from packcli.run.parts import PartsArea, part_prefix
from packcli.run.plan import Plan, partition_count, plan_partitions
from packcli.run.setup import PackResult, Setup, base_manifest, check_documents, set_up, tokenizer_entry
from packcli.storage import UrlPath
from packcli.util.progress import Reporter, SilentReporter
from packcli.write.publish import Publication, existing_output
from packcli.write.remote import RemotePublication

__all__ = ["pack_corpus", "partition_plan", "refuse_partitioned_url"]


def refuse_partitioned_url(options: PackOptions, out: Path) -> None:
    """A partitioned run publishes through a resumable local staging directory: an output URL takes a plain run.

    Raises:
        UsageError: ``--partitions`` (or ``--partition-size``) with an output URL.
    """
    if options.partitioned and isinstance(out, UrlPath):
        raise UsageError("--partitions: an output URL takes a plain run for now; pack to a path, or drop it")


def partition_plan(setup: Setup) -> tuple[Plan, str]:
    """The plan of ``setup``'s partitioned run and the fingerprint it gives the output (``--dry-run`` prints it)."""
    options, files = setup.options, setup.files
    plan = plan_partitions(files, partition_count(files, options.partitions, options.partition_size))
    return plan, setup.fingerprint(plan.digest)


def pack_corpus(
    inputs: list[str],
    options: PackOptions,
    out: Path,
    overwrite: bool = False,
    reporter: Reporter | None = None,
    warn: Callable[[str], None] = lambda message: None,
    stdin: Spool | None = None,
) -> PackResult:
    """Pack ``inputs`` into ``out`` (Arrow shards + manifest.json) under ``options``.

    An identical earlier run (same fingerprint, complete output) makes this a no-op with status "up-to-date".
    An existing output with another fingerprint is replaced only with ``overwrite``. An output URL (a
    :class:`~packcli.storage.UrlPath`) is published by :class:`~packcli.write.remote.RemotePublication`, and takes
    a plain run only. ``stdin``: the spool of standard input among ``inputs`` (see :mod:`packcli.read.stdin`).
    """
    reporter = reporter or SilentReporter()
    refuse_partitioned_url(options, out)  # before any work
    setup = set_up(inputs, options, warn, stdin)
    read = [*setup.files, *(Path(spec) for spec in inputs if Path(spec).is_dir())]  # what the output may not cover
    files = setup.files
    plan, fingerprint = partition_plan(setup) if options.partitioned else (None, setup.fingerprint())
    details: dict[str, Any] = {} if plan is None else {"partitions": len(plan)}
    if plan is not None and existing_output(out.resolve(), fingerprint, out) == "same":
        return PackResult(out, "up-to-date", read_manifest(out), details=details)  # no engine started
    count = len(plan) if plan is not None else 1
    facts = run_facts(fingerprint, plan, count, options, tokenizer_entry(setup), setup.encoder.supervised)
    shipped = ShippedTokenizer(setup.tokenizer) if setup.tokenizer is not None else None
    with (
        _engine(options) as engine,  # connects first: no staging if it cannot
        _publication(out, fingerprint, overwrite, read, plan is not None) as publication,
    ):
        if publication.up_to_date:
            return PackResult(out, "up-to-date", read_manifest(out), details=details)
        area = PartsArea(publication.staging)
        reused = area.resume(facts | {"inputs": input_facts(setup.inputs)}, count, warn)
        if plan is None:  # one job, in this process: live progress and warnings, errors raised as they are
            job = Job(0, tuple(files), options, publication.staging, facts, "shard", _sources(setup), setup.cache_key())
            task = partial(run_local, tokenizer=setup.tokenizer, reporter=reporter, warn=warn, threads=options.workers)
            engine.run([job], task, bool, None, None)
        else:
            progress = _Progress(plan, reporter, warn)
            progress.start(reused, area)
            jobs = [
                _partition_job(plan, k, options, publication.staging, facts) for k in range(count) if k not in reused
            ]
            if jobs:
                engine.run(jobs, run_job, progress.on_result, start_worker, shipped)
            progress.raise_first_failure(publication.staging)
        records = [area.read(k) for k in range(count)]
        totals, shards = merge_parts(records, facts)
        read_documents = sum(int(record.get("read_documents", 0)) for record in records if record is not None)
        check_documents(read_documents if plan is None else totals["input_documents"], totals, files, options)
        manifest = base_manifest(setup, fingerprint)
        manifest["tokenizer"].update(merged_backend(records))  # which backend encoded: outside the fingerprint
        totals["unread_files"] = setup.unread_files
        manifest.update(totals=totals, shards=shards)
        first = records[0] or {}
        if "sources" in first:
            manifest["sources"] = first["sources"]
        if plan is not None:
            manifest["partitions"] = plan.describe()
        area.finish()
        write_manifest(publication.staging, manifest)
        from_cache = bool(first.get("from_cache"))
        if from_cache:
            cache.discard(setup.cache_key())
        publication.commit()
    reporter.close()
    if plan is None:
        return PackResult(out, "packed", manifest, from_cache)
    gap = packing_gap(totals, options.max_len)
    if gap["packing_gap"] > PARTITIONING_WARNING:
        warn(
            f"{totals['sequences']:,} sequences are {gap['packing_gap']:.2%} above the lower bound "
            f"ceil(tokens / max_len) = {gap['lower_bound_sequences']:,}; packing {len(plan)} partitions apart costs "
            "at most that: fewer, larger partitions pack tighter"
        )
    return PackResult(out, "packed", manifest, details={**details, "partitions_reused": len(reused), **gap})


def _publication(
    out: Path, fingerprint: str, overwrite: bool, read: list[Path], resumable: bool
) -> Publication | RemotePublication:
    """The run's claim on ``out``: a directory is staged beside it and renamed into place; a URL (no rename in a
    store) is staged locally, uploaded under a run prefix and committed by writing its manifest last."""
    if isinstance(out, UrlPath):
        return RemotePublication(out, fingerprint, overwrite, inputs=read)
    return Publication(out, fingerprint, overwrite, inputs=read, resumable=resumable)


def _sources(setup: Setup) -> tuple[Any, ...] | None:
    return tuple(setup.sources) if setup.sources is not None else None


def _partition_job(plan: Plan, k: int, options: PackOptions, staging: Path, facts: dict[str, Any]) -> Job:
    """Partition ``k``'s job: its slices, its own seed, its shard names."""
    partition_options = replace(options, seed=partition_seed(options.seed, k))
    return Job(k, plan.partitions[k], partition_options, staging, facts, part_prefix(k))


def _engine(options: PackOptions) -> Engine:
    """The engine the options name: in-process for a plain run, else worker processes or Ray."""
    if not options.partitioned:
        from packcli.engines.inline import InlineEngine

        return InlineEngine()
    if options.engine == "ray":
        from packcli.engines.ray import RayEngine

        return RayEngine(options.workers, options.ray_address)
    from packcli.engines.local import LocalEngine

    return LocalEngine(options.workers)


@dataclass
class _Progress:
    """Partitions done, reported as they finish; warnings passed on once each; failures kept."""

    plan: Plan
    reporter: Reporter
    warn: Callable[[str], None]
    partitions: int = 0  # done so far, and their input bytes, documents and tokens
    bytes: int = 0
    documents: int = 0
    tokens: int = 0
    failures: list[JobResult] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def start(self, reused: list[int], area: PartsArea) -> None:
        """Reading begins, the reused partitions already done."""
        self.reporter.start(sum(self.plan.weights))
        for k in reused:
            record = area.read(k)
            assert record is not None
            self._count(k, record["totals"])

    def on_result(self, result: JobResult) -> bool:
        for message in result.warnings:
            if message not in self.seen:
                self.seen.add(message)
                self.warn(message)
        if result.failure is not None or result.totals is None:
            self.failures.append(result)
            return False
        self._count(result.partition, result.totals)
        return True

    def _count(self, partition: int, totals: dict[str, int]) -> None:
        self.partitions += 1
        self.bytes += self.plan.weights[partition]
        self.documents += totals["input_documents"]
        self.tokens += totals["input_tokens"]
        self.reporter.stage(f"partitions {self.partitions}/{len(self.plan)}")
        self.reporter.advance(self.bytes, self.documents, self.tokens)

    def raise_first_failure(self, staging: Path) -> None:
        """Raise the failure of the lowest partition id that failed, naming its file and line."""
        if not self.failures:
            return
        first = min(self.failures, key=lambda result: result.partition)
        assert first.failure is not None
        error = PackcliError(
            f"{first.failure.message} (partition {first.partition} of {len(self.plan)}; the {self.partitions} "
            f"partition(s) committed are kept in {staging}: rerun the same command to resume)",
            first.failure.path,
            first.failure.line,
        )
        error.exit_code = first.failure.exit_code
        raise error
