"""Merge the parts of a run from their manifests: every part's ``part`` block must agree on the run's facts
(fingerprint, plan hash, partition count, options, tokenizer, format and packcli versions, columns); totals are
summed and shards listed in partition order, so the merged manifest is the same whatever engine or worker count
produced the parts.

The packing gap: sequences against the lower bound ``ceil(tokens / max_len)``. It bounds what partitioning cost
(packing each partition on its own can only add sequences to one global packing, which is itself at or above the
bound); above PARTITIONING_WARNING the driver warns.
"""

from __future__ import annotations

import json
from typing import Any

from packcli.errors import PackcliError
from packcli.format.columns import FORMAT_VERSION, column_names
from packcli.options import PackOptions
from packcli.read.inputs import InputFile
from packcli.run.identity import resolved_options
from packcli.run.plan import Plan
from packcli.version import __version__

__all__ = ["PARTITIONING_WARNING", "input_facts", "merge_parts", "merged_backend", "packing_gap", "run_facts"]

PARTITIONING_WARNING = 0.005  # a packing gap above 0.5% is worth a warning
AGREED = (
    "fingerprint",
    "plan_hash",
    "partitions",
    "options",
    "tokenizer",
    "format_version",
    "packcli_version",
    "columns",
)


def run_facts(
    fingerprint: str,
    plan: Plan | None,
    partitions: int,
    options: PackOptions,
    tokenizer: dict[str, Any],
    supervised: bool,
) -> dict[str, Any]:
    """What every part of a run records in its manifest's ``part`` block and the merge checks (as JSON values, to
    compare with manifests read back)."""
    return {
        "fingerprint": fingerprint,
        "plan_hash": plan.digest if plan is not None else None,  # None: a plain run, one job on the whole corpus
        "partitions": partitions,
        "options": resolved_options(options),  # as the fingerprint sees them: a path's spelling is no difference
        # the manifest's tokenizer entry but its name (the path as spelled): the hashes and ids identify it
        "tokenizer": {key: value for key, value in tokenizer.items() if key != "name"},
        "format_version": FORMAT_VERSION,
        "packcli_version": __version__,
        "columns": column_names(supervised, options.position_ids),
    }


def input_facts(inputs: list[InputFile]) -> list[list[Any]]:
    """The inputs as the run found them (path, size, mtime; an object's ETag for its mtime): a rerun after an input
    changed reuses nothing."""
    return [[str(item.path), item.size, item.version] for item in inputs]


def merge_parts(
    manifests: list[dict[str, Any] | None], facts: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, int], list[Any]]:
    """The parts' manifests checked, and their merged totals and shard entries, in partition order.

    Raises:
        PackcliError: a partition is not committed, or a part disagrees with the run on one of the facts.
    """
    if len(manifests) != facts["partitions"]:
        raise PackcliError(f"expected {facts['partitions']} parts, found {len(manifests)}")
    parts = []
    for partition, manifest in enumerate(manifests):
        if manifest is None:
            raise PackcliError(f"partition {partition} has no manifest: it did not finish")
        part = manifest["part"]
        if part.get("partition") != partition:
            raise PackcliError(f"the manifest of partition {partition} is for partition {part.get('partition')}")
        for key in AGREED:
            if part.get(key) != facts[key]:
                raise PackcliError(
                    f"partition {partition} disagrees with the run on {key}: it was packed by another run "
                    "(another plan, options, tokenizer or packcli); rerun to pack it again"
                )
        parts.append(manifest)
    keys = list(parts[0]["totals"])
    for partition, manifest in enumerate(parts):
        if list(manifest["totals"]) != keys:
            raise PackcliError(f"partition {partition} has other totals than partition 0")
    totals = {key: sum(int(manifest["totals"][key]) for manifest in parts) for key in keys}
    return parts, totals, [shard for manifest in parts for shard in manifest["shards"]]


def merged_backend(manifests: list[dict[str, Any]]) -> dict[str, str]:
    """The tokenizer backend of a run from its parts' manifests: the one they all used, else every one used, joined
    by "+" (a part reused from an earlier run, or a worker where the fast backend does not import), with every
    reason a part fell back for."""
    used = sorted({json.dumps(_backend(manifest["tokenizer"]), sort_keys=True) for manifest in manifests})
    backends = [json.loads(entry) for entry in used]
    if len(backends) == 1:
        return dict(backends[0])
    merged = {key: "+".join(str(backend.get(key)) for backend in backends) for key in ("backend", "backend_version")}
    reasons = sorted({backend["backend_fallback"] for backend in backends if "backend_fallback" in backend})
    return {**merged, "backend_fallback": "; ".join(reasons)} if reasons else merged


def _backend(tokenizer: dict[str, Any]) -> dict[str, Any]:
    return {key: tokenizer[key] for key in ("backend", "backend_version", "backend_fallback") if key in tokenizer}


def packing_gap(totals: dict[str, int], max_len: int) -> dict[str, Any]:
    """Sequences against the lower bound ``ceil(tokens / max_len)``: the bound and the relative gap."""
    lower = -(-totals["tokens"] // max_len)
    return {"lower_bound_sequences": lower, "packing_gap": totals["sequences"] / lower - 1 if lower else 0.0}
