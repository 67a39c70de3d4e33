"""``pack --dry-run``: what a run would do, from the inputs' names and sizes, the tokenizer and the options, without
reading a record: nothing is tokenized or written (no staging, lock or cache entry). It resolves the run as ``pack``
does (set-up, fingerprint, plan, what ``--out`` holds), so the fingerprint it reports, a CI step's cache key, is the
one the run writes; a bad record is found only by the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packcli.errors import PackcliError
from packcli.options import PackOptions
from packcli.read.inputs import Spool
from packcli.run.setup import set_up, takes_output
from packcli.run.sources import manifest_weights
from packcli.storage.sources import parquet_source
from packcli.write.remote import output_state

__all__ = ["DryRun", "dry_run"]

# said in the report: "would pack" is not "the records are good"
CHECKED = "inputs exist and open, tokenizer loads, options combine; records are not read"


@dataclass(frozen=True)
class DryRun:
    """The plan of one ``pack``: ``status`` is "up-to-date" (the run would do nothing) or "would-pack"."""

    status: str
    fingerprint: str
    out: Path
    output: str  # what --out holds now: "absent", "same" (this fingerprint) or "other" (replaced: --overwrite)
    files: list[dict[str, Any]]  # per input file: path, bytes, documents (None where only reading would tell)
    facts: dict[str, Any]  # tokenizer, options, unread files, and (mixing) sources or (partitioned) partitions

    def to_json(self) -> dict[str, Any]:
        """The ``pack --dry-run --json`` object."""
        known = [entry["documents"] for entry in self.files]
        return {
            "dry_run": True,
            "status": self.status,
            "fingerprint": self.fingerprint,
            "out": str(self.out),
            "output": self.output,
            "input_files": len(self.files),
            "input_bytes": sum(entry["bytes"] for entry in self.files),
            "input_documents": None if None in known else sum(known),
            "files": self.files,
            "checked": CHECKED,
            **self.facts,
        }

    def lines(self) -> list[str]:
        """What ``pack --dry-run`` prints without ``--json``."""
        report = self.to_json()
        documents = report["input_documents"]
        read = f"{report['input_files']:,} file(s), {report['input_bytes']:,} bytes" + (
            "" if documents is None else f", {documents:,} documents"
        )
        doing = (
            f"{self.out} is up to date: the run would do nothing"
            if self.status == "up-to-date"
            else f"would read {read} and write {self.out}"
            + (" (replacing the output there)" if self.output == "other" else "")
        )
        lines = [f"fingerprint {self.fingerprint}", doing]
        partitions = self.facts.get("partitions")
        if partitions is not None:
            lines.append(f"  {partitions['count']:,} partitions (plan {partitions['plan_hash'][:16]})")
        lines.append(f"  checked: {CHECKED}")
        return lines


def dry_run(
    inputs: list[str],
    options: PackOptions,
    out: Path,
    overwrite: bool = False,
    warn: Callable[[str], None] = lambda message: None,
    stdin: Spool | None = None,
) -> DryRun:
    """Resolve ``pack inputs --out out`` with ``options`` and say what it would do, reading no record.

    Raises:
        UsageError: as ``pack`` would, before reading a record (options, strategy, partitions, weights).
        PackcliError: an input that cannot be opened, a tokenizer that does not load, or an ``--out`` that the run
            would refuse (another output there without ``overwrite``, or a directory that is not packcli's).
    """
    setup = set_up(inputs, options, warn, stdin, encodes=False)
    facts: dict[str, Any] = {
        "tokenizer": setup.tokenizer_entry(),
        "options": options.output_relevant(),
        "unread_files": setup.unread_files,
    }
    plan, fingerprint = setup.plan()
    if plan.partitioned:
        facts["partitions"] = {**plan.describe(), "bytes": list(plan.weights)}
    if setup.sources is not None:
        given = options.weights
        shares = manifest_weights(given) if given else [None] * len(setup.sources)  # None: as the corpus is
        facts["sources"] = [
            {"path": source.name, "files": len(source.files), "weight": share}
            for source, share in zip(setup.sources, shares)
        ]
    output = output_state(out, fingerprint)
    if output == "other" and not overwrite:
        raise PackcliError(
            "holds another packcli output (other inputs, tokenizer or options, or this run's output with a shard "
            "missing, not its listed size, listed twice or not listed): the run would refuse it without --overwrite",
            out,
        )
    status = "up-to-date" if output == "same" and takes_output(options.tokenizer_backend)(out) else "would-pack"
    return DryRun(status, fingerprint, out, output, [_file_entry(item.path, item.name) for item in setup.inputs], facts)


def _file_entry(path: Path, name: str) -> dict[str, Any]:
    """One input as the run would read it: its size, and its documents where the file says without reading
    records (a Parquet footer)."""
    try:
        with path.open("rb"):  # a URL: its object, through the store
            pass
    except OSError as exc:
        raise PackcliError(f"cannot be read ({exc.strerror or exc})", path) from None
    documents = None
    if path.name.lower().endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            documents = pq.read_metadata(parquet_source(path)).num_rows
        except (pa.ArrowException, OSError) as exc:
            raise PackcliError(f"not a readable Parquet file ({exc})", path) from None
    return {"path": name, "bytes": path.stat().st_size, "documents": documents}
