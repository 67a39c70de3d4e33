"""The one driver of every run: set up -> plan -> engine -> merge -> publish. The only place that knows the order.

Every run is a plan's jobs (:mod:`packcli.run.job`) on an engine: a plain run is the one job of
:meth:`~packcli.run.plan.Plan.whole` in this process, writing its shards straight into the staging directory; a
partitioned run's jobs commit parts (:mod:`packcli.run.parts`) that a rerun reuses. The output's manifest is written
last, the commit: an existing output stays intact until then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packcli.encode import cache
from packcli.encode.tokenizer import encoding_started
from packcli.engines import Engine
from packcli.engines.inline import InlineEngine
from packcli.engines.local import LocalEngine
from packcli.errors import PackcliError
from packcli.format.manifest import output_manifest, read_manifest, write_manifest
from packcli.options import PackOptions
from packcli.read.inputs import InputFile, Spool, input_changes
from packcli.run.job import Job, Shipped, run_job, start_worker
from packcli.run.parts import PartsArea, input_facts
from packcli.run.plan import Plan
from packcli.run.setup import PackResult, check_documents, kept_out_of_output, set_up, takes_output
from packcli.storage import UrlPath
from packcli.util.progress import Reporter, SilentReporter
from packcli.util.scratch import scratch_directory
from packcli.util.signals import signals_held
from packcli.write.publish import Publication, check_target
from packcli.write.remote import RemotePublication, output_state, remove_leftovers
from packcli.write.staging import FULL_DISK, resolved_out

__all__ = ["pack_corpus"]

PARTITIONING_WARNING = 0.005  # sequences over 0.5% above ceil(tokens / max_len), which partitioning may cost, warn


def pack_corpus(
    inputs: list[str],
    options: PackOptions,
    out: Path,
    overwrite: bool = False,
    reporter: Reporter | None = None,
    warn: Callable[[str], None] = lambda message: None,
    stdin: Spool | None = None,
    fork_workers: bool = False,
) -> PackResult:
    """Pack ``inputs`` into ``out`` (a directory or a :class:`~packcli.storage.UrlPath`) under ``options``: status
    "packed", or "up-to-date" where an output of the same fingerprint is complete; another output is replaced only
    with ``overwrite``. ``stdin``: the spool of standard input among ``inputs``. ``fork_workers``: every thread here
    is packcli's (its own command), so the local engine may fork its first worker."""
    reporter = reporter or SilentReporter()
    scratch_directory()  # a PACKCLI_SCRATCH that is no directory is refused before any work, not by a worker
    setup = set_up(inputs, options, warn, stdin, encodes=False)
    read = kept_out_of_output(inputs, setup.files)
    plan, fingerprint = setup.plan()
    partitioned = plan.partitioned
    details: dict[str, Any] = {"partitions": len(plan)} if partitioned else {}
    current = takes_output(options.tokenizer_backend)
    if partitioned and not isinstance(out, UrlPath):  # where --out is, before it is found up to date with no claim
        check_target(out, resolved_out(out), read)
    if partitioned and output_state(out, fingerprint) == "same" and current(out):
        remove_leftovers(out, fingerprint, warn)
        return PackResult(out, "up-to-date", read_manifest(out), details=details)  # no engine started
    shared, facts = setup.run_keys(fingerprint, plan)  # the manifest keys the output and its parts share
    claim = RemotePublication if isinstance(out, UrlPath) else Publication  # a store has no rename: commit by manifest
    with (
        _engine(options, fork_workers) as engine,  # connects first: no staging if it cannot
        claim(
            out, fingerprint, overwrite, inputs=read, resumable=partitioned, current=current, warn=warn
        ) as publication,
    ):
        if publication.up_to_date:
            return PackResult(out, "up-to-date", read_manifest(out), details=details)
        area = PartsArea(publication.parts if isinstance(publication, RemotePublication) else publication.staging)
        reused: list[int] = []
        if partitioned:  # a plain run's one job has nothing to resume
            run = facts | {"inputs": input_facts(setup.inputs)}
            reused = area.resume(run, len(plan), warn, options.tokenizer_backend)
        progress = _Progress(plan, reporter, warn, {k: manifest for k in reused if (manifest := area.read(k))})
        names = {str(item.path): item.name for item in setup.inputs}  # ``<stdin>`` for standard input's spool
        named = [tuple(names[str(piece.path)] for piece in slices) for slices in plan.partitions]
        key = None if partitioned else setup.cache_key()  # a plain run may take the tokens `stats` left
        jobs = [
            Job(k, plan.partitions[k], named[k], area.root, facts, shared, setup.sources, key, partitioned)
            for k in range(len(plan))
            if k not in reused
        ]
        live = None if partitioned else (reporter, warn)  # a plain run's job reports as it goes
        shipped = Shipped(setup.tokenizer, options, setup.template_source(), live)
        try:
            engine.run(jobs, run_job, progress.on_result, start_worker, shipped)
        except (PackcliError, OSError) as error:
            said = progress.failed(error, area.root)
            if isinstance(said, PackcliError):
                _refuse_changed_inputs(setup.inputs)  # the failure is the change, not a record it cut in two
            if said is error:
                raise
            raise said from None
        _refuse_changed_inputs(setup.inputs)  # the jobs read one version of each input: the fingerprint's
        parts = [progress.parts[k] for k in range(len(plan))]  # reused: checked against the run; new: the run's own
        sizes = [(item.name, item.size) for item in setup.inputs]
        manifest = output_manifest(shared, sizes, parts, setup.unread_files)
        totals = manifest["totals"]
        check_documents(sum(int(part["part"]["read_documents"]) for part in parts), totals, setup.files, options)
        if partitioned:  # a plain run wrote its shards in place
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
    if not partitioned:
        return PackResult(out, "packed", manifest, from_cache)
    lower = -(-totals["tokens"] // options.max_len)
    gap = {"lower_bound_sequences": lower, "packing_gap": totals["sequences"] / lower - 1 if lower else 0.0}
    if len(plan) > 1 and gap["packing_gap"] > PARTITIONING_WARNING:  # one partition: the gap is the strategy's
        warn(
            f"{totals['sequences']:,} sequences are {gap['packing_gap']:.2%} above the lower bound "
            f"ceil(tokens / max_len) = {lower:,}; packing {len(plan)} partitions apart costs "
            "at most that: fewer, larger partitions pack tighter"
        )
    return PackResult(out, "packed", manifest, details={**details, "partitions_reused": len(reused), **gap})


def _refuse_changed_inputs(inputs: list[InputFile]) -> None:
    """Refuse to publish what was read from an input that changed (or went) while the run read it: its partitions
    may hold two versions of it.

    Raises:
        PackcliError: naming the first input that changed, and how.
    """
    for item, change in zip(inputs, input_changes(inputs)):
        if change is not None:
            raise PackcliError(
                f"{change} while this run read it; nothing was published: rerun to pack it as it is now", item.name
            )


def _engine(options: PackOptions, fork_workers: bool = False) -> Engine:
    """The engine the options name: in-process for a plain run (``--workers``: its tokenizer threads), else worker
    processes or Ray."""
    if not options.partitioned:
        return InlineEngine(options.workers)
    if options.engine == "ray":
        from packcli.engines.ray import RayEngine  # imported here: Ray is an extra

        return RayEngine(options.workers, options.ray_address)
    return LocalEngine(options.workers, fork=fork_workers and not encoding_started())


@dataclass
class _Progress:
    """The jobs' parts as they come: a partitioned run reports the partitions done, passes each warning on once and
    names a failure's partition (a plain run's one job reports as it goes)."""

    plan: Plan
    reporter: Reporter
    warn: Callable[[str], None]
    parts: dict[int, dict[str, Any]]  # partition -> its manifest, the reused ones first
    bytes: int = 0  # the input bytes, documents and tokens of the partitions done
    documents: int = 0
    tokens: int = 0
    seen: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.plan.partitioned:
            self.reporter.start(sum(self.plan.weights))
            for k, manifest in list(self.parts.items()):
                self._count(k, manifest)

    def on_result(self, result: tuple[dict[str, Any], list[str]]) -> None:
        manifest, warnings = result
        for message in warnings:
            if message not in self.seen:
                self.seen.add(message)
                self.warn(message)
        k = manifest["part"]["partition"]
        self.parts[k] = manifest
        if self.plan.partitioned:
            self._count(k, manifest)

    def _count(self, partition: int, manifest: dict[str, Any]) -> None:
        self.bytes += self.plan.weights[partition]
        self.documents += manifest["totals"]["input_documents"]
        self.tokens += manifest["totals"]["input_tokens"]
        self.reporter.stage(f"partitions {len(self.parts)}/{len(self.plan)}")
        self.reporter.advance(self.bytes, self.documents, self.tokens)

    def failed(self, error: PackcliError | OSError, parts: Path) -> PackcliError | OSError:
        """A job's error as the run says it: naming its partition and what the run kept (a full disk is the
        publication's to say)."""
        k = getattr(error, "partition", None)
        if not self.plan.partitioned or k is None or (isinstance(error, OSError) and error.errno in FULL_DISK):
            return error
        kept = (
            f"the {len(self.parts)} partition(s) committed are kept in {parts} and reused by a rerun with the same "
            "inputs and options"
            if self.parts
            else "no partition was committed"
        )  # a fixed input or --skip-bad-records is another run: it packs every partition again
        if isinstance(error, OSError):
            error = PackcliError(error.strerror or str(error), error.filename)
        named = PackcliError(f"{error.message} (partition {k} of {len(self.plan)}; {kept})", error.path, error.line)
        named.exit_code = error.exit_code
        return named
