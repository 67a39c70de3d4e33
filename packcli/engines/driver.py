"""The driver of a partitioned run: plan -> resume -> run the partitions on an engine -> merge -> publish.

The plan comes from the inputs alone, so the same command gives the same partitions, shards and manifest on any
engine and worker count. Partitions are built in a staging directory that survives a failed or killed run
(``.OUT.packcli-resume``); a rerun with the same fingerprint reuses the committed ones. The merged manifest is
written last and the whole directory moved into place, as a single-process run does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packcli.engines.merge import PARTITIONING_WARNING, input_facts, merge_parts, packing_gap, run_facts
from packcli.engines.partition import PartitionJob, PartitionResult, ShippedTokenizer
from packcli.engines.parts import PartsArea
from packcli.errors import PackcliError
from packcli.pipeline import PackResult, Setup, base_manifest, check_documents, tokenizer_entry
from packcli.plan.partitions import Plan, partition_count, plan_partitions
from packcli.report.progress import Reporter
from packcli.write.manifest import read_manifest, write_manifest
from packcli.write.publish import Publication, existing_output

if TYPE_CHECKING:
    from packcli.engines.local import LocalEngine
    from packcli.engines.ray import RayEngine

__all__ = ["pack_partitioned", "partition_plan"]


def partition_plan(setup: Setup) -> tuple[Plan, str]:
    """The plan of ``setup``'s partitioned run and the fingerprint it gives the output (``--dry-run`` prints it)."""
    options, files = setup.options, setup.files
    plan = plan_partitions(files, partition_count(files, options.partitions, options.partition_size))
    return plan, setup.fingerprint(plan.digest)


def pack_partitioned(
    setup: Setup, out: Path, overwrite: bool, read: list[Path], reporter: Reporter, warn: Callable[[str], None]
) -> PackResult:
    """Pack ``setup``'s inputs as partitions on the engine its options name, and merge them into ``out``
    (``read``: the files and directories read, which the output may not cover)."""
    options, files = setup.options, setup.files
    plan, fingerprint = partition_plan(setup)
    if existing_output(out.resolve(), fingerprint, out) == "same":
        return PackResult(out, "up-to-date", read_manifest(out), details={"partitions": len(plan)})
    facts = run_facts(fingerprint, plan, options, tokenizer_entry(setup), setup.encoder.supervised)
    with (
        _engine(options.engine, options.workers, options.ray_address) as engine,  # connects first: no staging if not
        Publication(out, fingerprint, overwrite, inputs=read, resumable=True) as publication,
    ):
        area = PartsArea(publication.staging)
        reused = area.resume(facts | {"inputs": input_facts(files)}, len(plan), warn)
        progress = _Progress(plan, reporter, warn)
        progress.start(reused, area)
        todo = sorted(set(range(len(plan))) - set(reused))
        jobs = [PartitionJob(k, plan.partitions[k], options, publication.staging, facts) for k in todo]
        if jobs:
            engine.run(jobs, ShippedTokenizer.of(setup.tokenizer) if setup.tokenizer else None, progress.on_result)
        progress.raise_first_failure(publication.staging)
        totals, shards = merge_parts([area.read(k) for k in range(len(plan))], facts)
        check_documents(totals["input_documents"], totals, files, options)
        manifest = base_manifest(setup, fingerprint)
        totals["unread_files"] = setup.unread_files
        manifest.update(totals=totals, shards=shards, partitions=plan.describe())
        area.finish()
        write_manifest(publication.staging, manifest)
        publication.commit()
    reporter.close()
    gap = packing_gap(totals, options.max_len)
    if gap["packing_gap"] > PARTITIONING_WARNING:
        warn(
            f"{totals['sequences']:,} sequences are {gap['packing_gap']:.2%} above the lower bound "
            f"ceil(tokens / max_len) = {gap['lower_bound_sequences']:,}; packing {len(plan)} partitions apart costs "
            "at most that: fewer, larger partitions pack tighter"
        )
    return PackResult(
        out, "packed", manifest, details={"partitions": len(plan), "partitions_reused": len(reused), **gap}
    )


def _engine(name: str, workers: int | None, address: str | None) -> LocalEngine | RayEngine:
    if name == "ray":
        from packcli.engines.ray import RayEngine

        return RayEngine(workers, address)
    from packcli.engines.local import LocalEngine

    return LocalEngine(workers)


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
    failures: list[PartitionResult] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def start(self, reused: list[int], area: PartsArea) -> None:
        """Reading begins, the reused partitions already done."""
        self.reporter.start(sum(self.plan.weights))
        for k in reused:
            record = area.read(k)
            assert record is not None
            self._count(k, record["totals"])

    def on_result(self, result: PartitionResult) -> bool:
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
