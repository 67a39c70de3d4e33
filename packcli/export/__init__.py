"""``packcli export``: write a packcli output in the on-disk format a trainer reads (see docs/export.md).

The Arrow output is the canonical one; an export is derived from it, streaming (one record batch at a time), and
published like ``pack`` publishes: built in a staging directory beside ``--out``, ``export.json`` written last,
then swapped into place (:class:`~packcli.write.publish.Publication`); a rerun on the same source output, format
and options finds it up to date and writes nothing. One pass over the shards: ``packcli verify`` reads and checks
them, and hands each checked batch to the exporter, which writes it into the staging directory. The export is
published only when the whole output verifies; an output that fails is refused with verify's first problem and
the staging removed, so nothing is written at ``--out``. An error of the exporter's own waits for verify's verdict
(damage that verify names may show in the exporter first, in a shard not yet checked): the verdict is reported
when the output fails, the exporter's error when it passes. What a format's trainer would make of documents
otherwise than packcli does (split documents; documents without their EOS, or holding one before their end, where
it finds documents by EOS; ids of an unknown vocabulary, where it assumes a token type) is said in a warning. One
module per format: ``megatron``, ``bridge``, ``olmo_core``, ``nanotron``, ``mds``.
"""

from __future__ import annotations

import importlib
import json
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from packcli.errors import PackcliError, UsageError
from packcli.export.base import Exporter, ExportTotals
from packcli.export.reading import DocumentView, PackedOutput, open_packed, row_batch
from packcli.export.sources import SourcesFile, require_sources, sources_record
from packcli.format.manifest import recorded_name

__all__ = ["FORMATS", "ExportResult", "export_output"]

IN_FLIGHT = 2  # checked batches handed to the export thread and not yet written, at most
# format name -> (module, exporter class)
FORMATS = {
    "megatron": ("packcli.export.megatron", "MegatronExporter"),
    "bridge": ("packcli.export.bridge", "BridgeExporter"),
    "olmo-core": ("packcli.export.olmo_core", "OlmoCoreExporter"),
    "nanotron": ("packcli.export.nanotron", "NanotronExporter"),
    "mds": ("packcli.export.mds", "MdsExporter"),
}
# what the row formats do with split documents, said on stderr when the output has any
ROW_FORMAT_SPLITS = (
    "{count} document(s) longer than max_len were split by --overflow split: {fmt} stores packed rows, so each "
    "piece stays a document of its own in its row, as packcli's loader trains it"
)
# and what the document formats do with them when the output does not record where the pieces are
UNRECORDED_SPLITS = (
    "{count} document(s) longer than max_len were split by --overflow split, and this output does not record "
    "which pieces belong together (packed before split_pieces existed): {fmt} gets each piece as a document of "
    "its own; pack again to export them whole"
)

# and what they are told of the joins whose first token's supervision in the whole document the output does not tell
UNSURE_JOINS = (
    "{count} join(s) of split documents' pieces start with a token whose supervision in the whole document the output "
    "does not tell (a supervised span starts or ends there, or the labels were given with --labels-field): it stays "
    "unsupervised in {fmt}, as stored"
)

# the formats whose trainers find where documents end by EOS (Megatron's GPTDataset resetting positions at EOD,
# OLMo-core's packed dataset, llm-foundry's sequence ids), and what they are told of an output packed with --no-eos,
# or of documents --overflow truncate cut (at max_len, their EOS with them)
FOUND_BY_EOS = ("megatron", "olmo-core", "mds")
NO_EOS = (
    "this output was packed with --no-eos: no document ends in EOS, and {fmt}'s trainer finds where documents end "
    "by EOS, so they run together there; pack again without --no-eos to keep them apart"
)
INNER_EOS = (
    "{count} EOS id(s) stand inside documents (not at their end), and {fmt}'s trainer finds where documents end by "
    "EOS, so it cuts those documents there"
)
TRUNCATED_WITHOUT_EOS = (
    "{count} document(s) were cut at max_len by --overflow truncate, their EOS with them, and {fmt}'s trainer finds "
    "where documents end by EOS, so each runs into the next there; pack again with --overflow split to keep them apart"
)
# the formats whose readers take the token type from their own tokenizer's vocabulary, not from the files, and what
# they are told of an output that records no vocabulary (ids packed without a tokenizer: tokens written as uint32)
READER_TOKEN_TYPE = {
    "olmo-core": "OLMo-core assumes the smallest type its tokenizer's vocabulary needs (uint16 for GPT-2): set "
    'dtype="uint32" in its dataset config',
    "nanotron": "nanotron's Nanoset reads 2-byte tokens unless its tokenizer has more than 65,536 ids",
}
UNKNOWN_VOCABULARY = (
    "this output was packed from token ids without a tokenizer, so {fmt}'s tokens are uint32 (the vocabulary is "
    "unknown), and {reader}; or pack again with --tokenizer to write the type the reader assumes"
)


@dataclass(frozen=True)
class ExportResult:
    """What an export did: "exported" or "up-to-date", and its record (``export.json``)."""

    status: str
    record: dict[str, Any]

    def summary(self, out: Path) -> dict[str, Any]:
        return {"status": self.status, "out": recorded_name(str(out)), **self.record}


def export_output(
    source: Path,
    fmt: str,
    out: Path,
    options: dict[str, Any] | None = None,
    overwrite: bool = False,
    warn: Callable[[str], None] = lambda message: None,
) -> ExportResult:
    """Export the packcli output ``source`` to ``fmt`` in ``out``.

    Args:
        source: a packcli output directory (plain or partitioned), or an output URL (fetched to a temporary local
            copy first; the export's record names the URL).
        fmt: a key of :data:`FORMATS`.
        out: the export directory (replaced only if it holds another export, with ``overwrite``).
        options: format options (``pad_to_multiple`` for bridge; ``sources``: also each sample's sources, in the
            format's place for them or ``sources.jsonl``, see :mod:`packcli.export.sources`).
        overwrite: replace an export of another source, format or options.
        warn: where notices go (stderr on the command line).

    Raises:
        UsageError: an unknown format, a format that cannot carry this output (labels), or a ``pad_to_multiple``
            outside 1..max_len or padding a batch of rows past list<int32>.
        PackcliError: the source is not a packcli output or fails verify (nothing written), or an I/O error.
    """
    from packcli.export.record import (
        EXPORT_NAME,
        existing_export,
        export_fingerprint,
        export_identity,
        write_record,
    )
    from packcli.format.sidecars import lists_split_pieces
    from packcli.write.publish import Publication

    if fmt not in FORMATS:
        raise UsageError(f"--to must be one of {', '.join(FORMATS)}, not {fmt!r}")
    options = {key: value for key, value in (options or {}).items() if value is not None}
    packed = open_packed(source)  # an output URL: its shards streamed as they are verified and exported
    if options.get("sources"):
        require_sources(packed)
    fingerprint = export_fingerprint(packed.manifest["fingerprint"], fmt, options)
    module, name = FORMATS[fmt]
    make: Callable[[Path, Any, dict[str, Any]], Exporter] = getattr(importlib.import_module(module), name)
    identity = export_identity(source, packed.manifest["fingerprint"], fmt, options)
    existing = partial(existing_export, asked=identity, overwrite=overwrite)
    with Publication(out, fingerprint, overwrite, inputs=[source], existing=existing) as publication:
        if publication.up_to_date:
            return ExportResult("up-to-date", json.loads((out / EXPORT_NAME).read_text(encoding="utf-8")))
        exporter = make(publication.staging, packed, options)  # refuses an output the format cannot carry
        try:
            sidecar = SourcesFile(publication.staging, packed) if options.get("sources") and fmt != "mds" else None
            feed = _export_verified(packed, exporter, sidecar)
            split = int(packed.manifest["totals"].get("split_documents", 0))
            if exporter.view == "rows" and split:
                warn(ROW_FORMAT_SPLITS.format(count=split, fmt=fmt))
            elif split and not any(lists_split_pieces(shard) for shard in packed.manifest["shards"]):
                warn(UNRECORDED_SPLITS.format(count=split, fmt=fmt))
            if feed.documents is not None and feed.documents.unsure:
                warn(UNSURE_JOINS.format(count=feed.documents.unsure, fmt=fmt))
            if fmt in READER_TOKEN_TYPE and packed.vocab_size is None:
                warn(UNKNOWN_VOCABULARY.format(fmt=fmt, reader=READER_TOKEN_TYPE[fmt]))
            if fmt in FOUND_BY_EOS:
                truncated = int(packed.manifest["totals"].get("truncated_documents", 0))
                if packed.eos_id is None:
                    warn(NO_EOS.format(fmt=fmt))
                elif truncated:
                    warn(TRUNCATED_WITHOUT_EOS.format(count=truncated, fmt=fmt))
                if feed.inner_eos:
                    warn(INNER_EOS.format(count=feed.inner_eos, fmt=fmt))
            totals: ExportTotals = exporter.finish()
        finally:
            exporter.close()
        files = sorted(path for path in publication.staging.iterdir() if path.is_file())
        record = {
            **identity,
            "fingerprint": fingerprint,
            "files": [{"file": path.name, "bytes": path.stat().st_size} for path in files],
            "totals": totals.to_json(),
            **({"sources": sources_record(fmt)} if options.get("sources") else {}),
        }
        written = write_record(publication.staging, record)
        publication.commit()
    return ExportResult("exported", written)


def _export_verified(packed: PackedOutput, exporter: Exporter, sources: SourcesFile | None) -> _Feed:
    """Verify ``packed``, handing each batch to ``exporter`` (and its sources to ``sources``) once it is checked;
    the feed that did (its counts).

    Raises:
        PackcliError: the output fails verify (its first problem named, the count given); nothing is published.
        Exception: the exporter's own error, when the output verifies.
    """
    from packcli.report.verify import verify_output

    feed = _Feed(packed, exporter, sources)
    try:
        report = verify_output(packed.path, feed)
    finally:
        feed.close()
    if not report.ok:
        raise PackcliError(
            f"fails verify ({report.count} problem(s); first: {report.problems[0]}); nothing was exported: run "
            "packcli verify on it, or pack it again",
            packed.path,
        )
    if feed.error is not None:
        raise feed.error
    return feed


class _Feed:
    """verify's consumer: each checked batch to the exporter, in the view it takes, on a helper thread (the export's
    numpy, Parquet and file writes mostly release the GIL, so it overlaps verify's checks), at most ``IN_FLIGHT``
    batches behind. The first error stops the feeding and is kept (``error``) until verify's verdict is in. It counts
    the EOS ids that stand inside the documents the exporter takes (``inner_eos``), where a trainer finding
    documents by EOS would cut them."""

    def __init__(self, packed: PackedOutput, exporter: Exporter, sources: SourcesFile | None) -> None:
        self.packed = packed
        self.exporter = exporter
        self.sources = sources
        self.documents: DocumentView | None = None
        self.error: Exception | None = None
        self.inner_eos = 0
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="packcli-export")
        self.pending: deque[Future[None]] = deque()

    def __call__(self, shard: int, first_row: int, batch: pa.RecordBatch) -> None:
        while len(self.pending) >= IN_FLIGHT:
            self.pending.popleft().result()
        self.pending.append(self.worker.submit(self._write, shard, first_row, batch))

    def close(self) -> None:
        """Wait for the batches in flight: after this, nothing writes into the staging directory."""
        self.worker.shutdown(wait=True)
        self.pending.clear()
        if self.documents is not None:
            self.documents.close()
        if self.sources is not None:
            self.sources.close()

    def _write(self, shard: int, first_row: int, batch: pa.RecordBatch) -> None:
        if self.error is not None:
            return
        try:
            rows = row_batch(shard, first_row, batch)
            if self.exporter.view == "rows":
                self._count_inner_eos(rows.tokens, rows.lengths, None)
                self.exporter.write(rows)
                if self.sources is not None:
                    self.sources.rows(rows)
                return
            if self.documents is None:
                self.documents = DocumentView(self.packed)
            documents = self.documents.documents(rows)
            self._count_inner_eos(documents.tokens, documents.lengths, documents.ends)
            self.exporter.write(documents)
            if self.sources is not None:
                self.sources.documents(rows, documents)
        except Exception as exc:  # raised after verify's verdict, which names damage first
            self.error = exc

    def _count_inner_eos(self, tokens: np.ndarray, lengths: np.ndarray, ends: np.ndarray | None) -> None:
        """Count the EOS ids of ``tokens`` that are not a document's last token (``ends``: which pieces end one)."""
        eos = self.packed.eos_id
        if eos is None or not len(tokens):
            return
        last = np.cumsum(lengths) - 1
        if ends is not None:
            last = last[ends]
        self.inner_eos += int(np.count_nonzero(tokens == eos)) - int(np.count_nonzero(tokens[last] == eos))
