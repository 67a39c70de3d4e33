"""The one driver of every run: set up -> plan -> engine -> merge -> publish. The only place that knows the order.

A plain run is one job on the in-process engine, its shards ``shard-NNNNN.arrow``, in a fresh staging directory;
a partitioned run (``--partitions``) is one job per partition of a plan made from the inputs alone, on worker
processes or Ray, in a parts area that survives a failed or killed run (``.OUT.packcli-resume`` beside a local
output, the run's ``OUT/packcli-run-.../`` prefix in the store of an output URL) so that a rerun with the same
fingerprint reuses the committed partitions. Either way each job commits a part, a small output with its own manifest
(:mod:`packcli.run.parts`); the merge reads the parts' manifests and brings their shards into the output, and the
output's manifest is written last, the commit: an interrupted run never leaves an output that looks complete, and
an existing output stays intact until then. A worker needs no path of the driver's: with an output URL its part is
built on its node's scratch and uploaded to the store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from packcli.encode import cache
from packcli.engines import Engine
from packcli.errors import PackcliError
from packcli.format.manifest import read_manifest, write_manifest
from packcli.options import PackOptions
from packcli.read.inputs import InputFile, Spool, input_changes
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
from packcli.run.setup import (
    PackResult,
    Setup,
    base_manifest,
    check_documents,
    set_up,
    takes_output,
    tokenizer_entry,
)
from packcli.storage import UrlPath, location
from packcli.util.progress import Reporter, SilentReporter
from packcli.util.signals import signals_held
from packcli.write.publish import Publication
from packcli.write.remote import RemotePublication, output_state, remove_leftovers, scratch_directory
from packcli.write.staging import FULL_DISK

__all__ = ["pack_corpus", "partition_plan"]


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
    :class:`~packcli.storage.UrlPath`) is published by :class:`~packcli.write.remote.RemotePublication`; a
    partitioned run to one keeps its parts in the store. ``stdin``: the spool of standard input among ``inputs``
    (see :mod:`packcli.read.stdin`).
    """
    reporter = reporter or SilentReporter()
    scratch_directory()  # a PACKCLI_SCRATCH that is no directory is refused before any work, not by a worker
    setup = set_up(inputs, options, warn, stdin, encodes=False)
    local = [path for path in map(location, inputs) if not isinstance(path, UrlPath)]
    read = [*setup.files, *(path for path in local if path.is_dir())]  # what the output may not cover
    files = setup.files
    plan, fingerprint = partition_plan(setup) if options.partitioned else (None, setup.fingerprint())
    details: dict[str, Any] = {} if plan is None else {"partitions": len(plan)}
    current = takes_output(options.tokenizer_backend)
    if plan is not None and output_state(out, fingerprint) == "same" and current(out):
        remove_leftovers(out, fingerprint, warn)
        return PackResult(out, "up-to-date", read_manifest(out), details=details)  # no engine started
    count = len(plan) if plan is not None else 1
    facts = run_facts(fingerprint, plan, count, options, tokenizer_entry(setup), setup.encoder.supervised)
    shipped = ShippedTokenizer(setup.tokenizer) if setup.tokenizer is not None else None
    manifest = base_manifest(setup, fingerprint)
    if plan is not None:
        manifest["partitions"] = plan.describe()
    part_manifest = {key: value for key, value in manifest.items() if key != "inputs"}  # what the parts share
    with (
        _engine(options) as engine,  # connects first: no staging if it cannot
        _publication(out, fingerprint, overwrite, read, plan is not None, current, warn) as publication,
    ):
        if publication.up_to_date:
            return PackResult(out, "up-to-date", read_manifest(out), details=details)
        area = PartsArea(publication.parts if isinstance(publication, RemotePublication) else publication.staging)
        reused = area.resume(facts | {"inputs": input_facts(setup.inputs)}, count, warn, options.tokenizer_backend)
        try:
            if plan is None:  # one job, in this process: live progress and warnings, errors raised as they are
                job = Job(
                    0,
                    tuple(files),
                    options,
                    area.root,
                    facts,
                    part_manifest,
                    "shard",
                    _sources(setup),
                    setup.cache_key(),
                    setup.template_source(),
                    _input_names(setup),
                )
                task = partial(
                    run_local, tokenizer=setup.tokenizer, reporter=reporter, warn=warn, threads=options.workers
                )
                engine.run([job], task, bool, None, None)
            else:
                progress = _Progress(plan, reporter, warn)
                progress.start(reused, area)
                template = setup.template_source()
                names = _input_names(setup)
                jobs = [
                    _partition_job(plan, k, options, area.root, facts, part_manifest, template, names)
                    for k in range(count)
                ]
                jobs = [job for job in jobs if job.partition not in reused]
                if jobs:
                    engine.run(jobs, run_job, progress.on_result, start_worker, shipped)
                progress.raise_first_failure(area.root)
        except PackcliError:
            _refuse_changed_inputs(setup.inputs)  # the failure is the change, not a record it cut in two
            raise
        _refuse_changed_inputs(setup.inputs)  # the parts read one version of each input: the fingerprint's
        parts, totals, shards = merge_parts([area.read(k) for k in range(count)], facts)
        read_documents = sum(int(part["part"]["read_documents"]) for part in parts)
        check_documents(read_documents if plan is None else totals["input_documents"], totals, files, options)
        manifest["tokenizer"].update(merged_backend(parts))  # which backend encoded: outside the fingerprint
        totals["unread_files"] = setup.unread_files
        manifest.update(totals=totals, shards=shards)
        if "sources" in parts[0]:
            manifest["sources"] = parts[0]["sources"]
        area.gather(publication.staging, parts)
        write_manifest(publication.staging, manifest)
        from_cache = bool(parts[0]["part"]["from_cache"])
        if from_cache:
            cache.discard(setup.cache_key())
        if isinstance(publication, RemotePublication):
            publication.commit()
        else:
            with signals_held():  # the parts stay committed until the output is in place
                area.remove_records()
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


def _refuse_changed_inputs(inputs: list[InputFile]) -> None:
    """Refuse to publish what was read from an input that changed (or went) while the run read it: its partitions
    may hold two versions of it, or records cut where the new version has no line start. One request an input to a
    store, a few at once.

    Raises:
        PackcliError: naming the first input that changed, and how.
    """
    for item, change in zip(inputs, input_changes(inputs)):
        if change is not None:
            raise PackcliError(
                f"{change} while this run read it; nothing was published: rerun to pack it as it is now", item.name
            )


def _publication(
    out: Path,
    fingerprint: str,
    overwrite: bool,
    read: list[Path],
    resumable: bool,
    current: Callable[[Path], bool],
    warn: Callable[[str], None],
) -> Publication | RemotePublication:
    """The run's claim on ``out``: a directory is staged beside it and renamed into place; a URL (no rename in a
    store) is staged locally, uploaded under a run prefix and committed by writing its manifest last. ``current``:
    whether an output of the run's fingerprint there is current (else the run replaces it)."""
    if isinstance(out, UrlPath):
        return RemotePublication(
            out, fingerprint, overwrite, inputs=read, resumable=resumable, current=current, warn=warn
        )
    return Publication(out, fingerprint, overwrite, inputs=read, resumable=resumable, current=current, warn=warn)


def _sources(setup: Setup) -> tuple[Any, ...] | None:
    return tuple(setup.sources) if setup.sources is not None else None


def _partition_job(
    plan: Plan,
    k: int,
    options: PackOptions,
    parts: Path,
    facts: dict[str, Any],
    manifest: dict[str, Any],
    template: str | None,
    names: dict[str, str],
) -> Job:
    """Partition ``k``'s job: its slices, its own seed, its shard names, the chat template's text, the inputs'
    names."""
    partition_options = replace(options, seed=partition_seed(options.seed, k))
    return Job(
        k,
        plan.partitions[k],
        partition_options,
        parts,
        facts,
        manifest,
        part_prefix(k),
        chat_template=template,
        input_names=names,
    )


def _input_names(setup: Setup) -> dict[str, str]:
    """Each input's path and the name the manifest gives it (``<stdin>`` for the spool of standard input)."""
    return {str(item.path): item.name for item in setup.inputs}


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

    def raise_first_failure(self, parts: Path) -> None:
        """Raise the failure of the lowest partition id that failed, naming its file and line."""
        if not self.failures:
            return
        first = min(self.failures, key=lambda result: result.partition)
        assert first.failure is not None
        if first.failure.errno in FULL_DISK:  # the publication says it, naming the output and what it kept
            raise OSError(first.failure.errno, first.failure.message, first.failure.path)
        kept = (
            f"the {self.partitions} partition(s) committed are kept in {parts} and reused by a rerun with the same "
            "inputs and options"
            if self.partitions
            else "no partition was committed"
        )  # a fixed input or --skip-bad-records is another run: it packs every partition again
        error = PackcliError(
            f"{first.failure.message} (partition {first.partition} of {len(self.plan)}; {kept})",
            first.failure.path,
            first.failure.line,
        )
        error.exit_code = first.failure.exit_code
        raise error
