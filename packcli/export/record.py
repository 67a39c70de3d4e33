"""``export.json``: an export's own small manifest, written last (the commit point of the staged export).

It names the format, the source output (its path and fingerprint), the export options, the files written (name
and size) and the totals. Its ``fingerprint`` (sha256 of the source fingerprint, the format, the options and the
export layout version) decides whether a rerun has anything to do. Invariant: a directory holding a readable
``export.json`` whose files all have their listed sizes is a complete export.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from packcli import __version__
from packcli.errors import PackcliError
from packcli.write.manifest import dumps, write_manifest
from packcli.write.publish import Existing, directory_names

__all__ = ["EXPORT_NAME", "LAYOUT_VERSION", "existing_export", "export_fingerprint", "write_record"]

EXPORT_NAME = "export.json"
LAYOUT_VERSION = 1  # bumped when an exporter changes the bytes it writes for the same source and options


def export_fingerprint(source_fingerprint: str, fmt: str, options: dict[str, Any]) -> str:
    """The identity of an export: same source output, format, options and layout, same bytes."""
    text = dumps({"source": source_fingerprint, "format": fmt, "options": options, "layout": LAYOUT_VERSION})
    return hashlib.sha256(text.encode()).hexdigest()


def write_record(directory: Path, record: dict[str, Any]) -> None:
    """Write ``export.json`` atomically (the same way as an output's manifest)."""
    write_manifest(directory, {"packcli_version": __version__, "layout_version": LAYOUT_VERSION, **record}, EXPORT_NAME)


def existing_export(target: Path, fingerprint: str, shown: Path) -> Existing:
    """What ``target`` holds: "absent", "same" (a complete export of this fingerprint) or "other" (another export,
    which ``--overwrite`` may replace).

    Raises:
        PackcliError: ``target`` is not a directory, or holds files but no readable ``export.json``, or a file the
            export does not list: such a directory is never replaced.
    """
    names = directory_names(target, shown)
    if not names:
        return "absent"
    try:
        record = json.loads((target / EXPORT_NAME).read_text(encoding="utf-8"))
        files = {str(entry["file"]): int(entry["bytes"]) for entry in record["files"]}
        same = record["fingerprint"] == fingerprint
    except (OSError, ValueError, KeyError, TypeError):
        raise PackcliError(
            f"holds {names[0]!r} but is not a packcli export (no readable {EXPORT_NAME}); packcli replaces only its "
            "own exports or an empty directory: choose another --out, or remove it yourself",
            shown,
        ) from None
    foreign = next((name for name in names if name != EXPORT_NAME and name not in files), None)
    if foreign is not None:
        raise PackcliError(
            f"holds {foreign!r}, which is not part of the packcli export there: move that file away or choose "
            "another --out",
            shown,
        )
    intact = all((target / name).is_file() and (target / name).stat().st_size == size for name, size in files.items())
    return "same" if same and intact else "other"
