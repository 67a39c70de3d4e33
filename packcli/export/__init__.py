"""``packcli export``: write a packcli output in the on-disk format a trainer reads (see docs/export.md).

The Arrow output is the canonical one; an export is derived from it, streaming (one record batch at a time), and
published like ``pack`` publishes: built in a staging directory beside ``--out``, ``export.json`` written last,
then swapped into place (:class:`~packcli.write.publish.Publication`); a rerun on the same source output, format
and options finds it up to date and writes nothing. The source is checked as ``packcli verify`` checks it before
anything is written. One module per format: ``megatron``, ``bridge``, ``olmo_core``, ``nanotron``, ``mds``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packcli.errors import UsageError
from packcli.export.base import Exporter, ExportTotals

__all__ = ["FORMATS", "ExportResult", "export_output"]

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


@dataclass(frozen=True)
class ExportResult:
    """What an export did: "exported" or "up-to-date", and its record (``export.json``)."""

    status: str
    record: dict[str, Any]

    def summary(self, out: Path) -> dict[str, Any]:
        return {"status": self.status, "out": str(out), **self.record}


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
        source: a packcli output directory (plain or partitioned).
        fmt: a key of :data:`FORMATS`.
        out: the export directory (replaced only if it holds another export, with ``overwrite``).
        options: format options (``pad_to_multiple`` for bridge).
        overwrite: replace an export of another source, format or options.
        warn: where notices go (stderr on the command line).

    Raises:
        UsageError: an unknown format, or a format that cannot carry this output (labels).
        PackcliError: the source is not a packcli output or fails verify (nothing written), or an I/O error.
    """
    from packcli.export.reading import check_intact, document_batches, open_packed, row_batches
    from packcli.export.record import EXPORT_NAME, existing_export, export_fingerprint, write_record
    from packcli.write.publish import Publication
    from packcli.write.splits import SPLIT_PIECES

    if fmt not in FORMATS:
        raise UsageError(f"--to must be one of {', '.join(FORMATS)}, not {fmt!r}")
    options = {key: value for key, value in (options or {}).items() if value is not None}
    packed = open_packed(source)
    fingerprint = export_fingerprint(packed.manifest["fingerprint"], fmt, options)
    module, name = FORMATS[fmt]
    make: Callable[[Path, Any, dict[str, Any]], Exporter] = getattr(importlib.import_module(module), name)
    with Publication(out, fingerprint, overwrite, inputs=[source], existing=existing_export) as publication:
        if publication.up_to_date:
            return ExportResult("up-to-date", json.loads((out / EXPORT_NAME).read_text(encoding="utf-8")))
        exporter = make(publication.staging, packed, options)  # refuses an output the format cannot carry
        check_intact(packed)
        split = int(packed.manifest["totals"].get("split_documents", 0))
        if exporter.view == "rows" and split:
            warn(ROW_FORMAT_SPLITS.format(count=split, fmt=fmt))
        elif split and not any(SPLIT_PIECES in shard for shard in packed.manifest["shards"]):
            warn(UNRECORDED_SPLITS.format(count=split, fmt=fmt))
        for batch in row_batches(packed) if exporter.view == "rows" else document_batches(packed):
            exporter.write(batch)
        totals: ExportTotals = exporter.finish()
        files = sorted(path for path in publication.staging.iterdir() if path.is_file())
        record = {
            "format": fmt,
            "fingerprint": fingerprint,
            "options": options,
            "source": {"path": str(source), "fingerprint": packed.manifest["fingerprint"]},
            "files": [{"file": path.name, "bytes": path.stat().st_size} for path in files],
            "totals": totals.to_json(),
        }
        write_record(publication.staging, record)
        publication.commit()
    return ExportResult("exported", record)
