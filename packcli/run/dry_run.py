"""``pack --dry-run``: what a run would do, from the inputs' names and sizes, the tokenizer and the options, without
reading a record: nothing is tokenized or written (no staging, lock or cache entry). It resolves the run as ``pack``
does (set-up, fingerprint, plan, what ``--out`` holds), so the fingerprint it reports, a CI step's cache key, is the
one the run writes; a bad record is found only by the run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from packcli.errors import PackcliError
from packcli.format.manifest import recorded_name
from packcli.options import PackOptions
from packcli.read.inputs import Spool
from packcli.run.setup import kept_out_of_output, set_up, takes_output
from packcli.run.sources import manifest_weights
from packcli.storage.sources import parquet_source
from packcli.storage.urls import UrlPath
from packcli.write.publish import check_target, lock_refusal
from packcli.write.remote import output_state
from packcli.write.staging import resolved_out, up_to_date

__all__ = ["dry_run"]

# said in the report: "would pack" is not "the records are good"
CHECKED = "inputs exist and open, tokenizer loads, options combine; records are not read"


def dry_run(
    inputs: list[str],
    options: PackOptions,
    out: Path,
    overwrite: bool = False,
    warn: Callable[[str], None] = lambda message: None,
    stdin: Spool | None = None,
) -> dict[str, Any]:
    """What ``pack inputs --out out`` would do, reading no record: the ``pack --dry-run --json`` object. ``status``:
    "up-to-date" or "would-pack"; ``output``, what ``--out`` holds: "absent", "same" (this fingerprint) or "other".

    Raises:
        UsageError: as ``pack`` would, before reading a record (options, strategy, partitions, weights).
        PackcliError: an input that cannot be opened, a tokenizer that does not load, or an ``--out`` that the run
            would refuse (another output there without ``overwrite``, a directory that is not packcli's, or one
            where no lock can be made: a read-only file system, a directory this user may not write).
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
    local = not isinstance(out, UrlPath)
    if local:  # as the run checks, in its order: where it goes, what is there, whether it can take the lock
        check_target(out, resolved_out(out), kept_out_of_output(inputs, setup.files))
    output = output_state(out, fingerprint)
    same = output == "same" and takes_output(options.tokenizer_backend)(out)
    refusal = lock_refusal(out) if local and not same else None
    if refusal is not None:
        raise refusal
    up_to_date(output, overwrite, out)  # another output without overwrite: refused in the run's words
    files = [_file_entry(item.path, item.name) for item in setup.inputs]  # documents: None where only reading tells
    known = [entry["documents"] for entry in files]
    return {
        "dry_run": True,
        "status": "up-to-date" if same else "would-pack",
        "fingerprint": fingerprint,
        "out": recorded_name(str(out)),
        "output": output,
        "input_files": len(files),
        "input_bytes": sum(entry["bytes"] for entry in files),
        "input_documents": None if None in known else sum(known),
        "files": files,
        "checked": CHECKED,
        **facts,
    }


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
