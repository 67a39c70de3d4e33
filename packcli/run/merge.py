"""Check the parts of a run before their manifests are merged: every part's ``part`` block must agree on the run's
facts (:func:`~packcli.format.manifest.part_facts`: fingerprint, plan hash, partition count, options, tokenizer,
format and packcli versions, columns) and hold the same totals keys; the merge
(:func:`~packcli.format.manifest.output_manifest`) sums them and lists shards in partition order, so the merged
manifest is the same whatever engine or worker count produced the parts.

The packing gap: sequences against the lower bound ``ceil(tokens / max_len)``. It bounds what partitioning cost
(packing each partition on its own can only add sequences to one global packing, which is itself at or above the
bound); above PARTITIONING_WARNING the driver warns.
"""

from __future__ import annotations

from typing import Any

from packcli.errors import PackcliError
from packcli.read.inputs import InputFile

__all__ = ["PARTITIONING_WARNING", "input_facts", "merge_parts", "packing_gap"]

PARTITIONING_WARNING = 0.005  # a packing gap above 0.5% is worth a warning


def input_facts(inputs: list[InputFile]) -> list[list[Any]]:
    """The inputs as the run found them (path, size, mtime; an object's ETag for its mtime): a rerun after an input
    changed reuses nothing."""
    return [[str(item.path), item.size, item.version] for item in inputs]


def merge_parts(manifests: list[dict[str, Any] | None], facts: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts' manifests checked, in partition order, for :func:`~packcli.format.manifest.output_manifest`.

    Raises:
        PackcliError: a partition is not committed, or a part disagrees with the run on one of the facts.
    """
    if len(manifests) != facts["partitions"]:
        raise PackcliError(f"expected {facts['partitions']} parts, found {len(manifests)}")
    parts: list[dict[str, Any]] = []
    for partition, manifest in enumerate(manifests):
        if manifest is None:
            raise PackcliError(f"partition {partition} has no manifest: it did not finish")
        part = manifest["part"]
        if part.get("partition") != partition:
            raise PackcliError(f"the manifest of partition {partition} is for partition {part.get('partition')}")
        for key in (key for key in facts if part.get(key) != facts[key]):
            raise PackcliError(
                f"partition {partition} disagrees with the run on {key}: it was packed by another run "
                "(another plan, options, tokenizer or packcli); rerun to pack it again"
            )
        if parts and list(manifest["totals"]) != list(parts[0]["totals"]):
            raise PackcliError(f"partition {partition} has other totals than partition 0")
        parts.append(manifest)
    return parts


def packing_gap(totals: dict[str, int], max_len: int) -> dict[str, Any]:
    """Sequences against the lower bound ``ceil(tokens / max_len)``: the bound and the relative gap."""
    lower = -(-totals["tokens"] // max_len)
    return {"lower_bound_sequences": lower, "packing_gap": totals["sequences"] / lower - 1 if lower else 0.0}
