"""``export.json``: an export's own small manifest, written last (the commit point of the staged export).

It names the format, the source output (its path and fingerprint), the export options, the files written (name
and size) and the totals. Its ``fingerprint`` (sha256 of the source fingerprint, the format, the options and the
export layout version) decides whether a rerun has anything to do; another export there is replaced only with
``--overwrite``, and the refusal without it says what differs (format, packed output, options, layout), from the two
records. Invariant: a directory holding a readable ``export.json`` whose files all have their listed sizes is a
complete export.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from packcli.errors import PackcliError
from packcli.format.integrity import directory_sizes
from packcli.format.manifest import EXPORT_NAME, MANIFEST_NAME, recorded_name, write_manifest
from packcli.util.files import canonical_json
from packcli.version import __version__
from packcli.write.staging import Existing, directory_names

__all__ = ["EXPORT_NAME", "LAYOUT_VERSION", "existing_export", "export_fingerprint", "export_identity", "write_record"]

LAYOUT_VERSION = 2  # bumped when an exporter changes the bytes it writes for the same source and options


def export_fingerprint(source_fingerprint: str, fmt: str, options: dict[str, Any]) -> str:
    """The identity of an export: same source output, format, options and layout, same bytes."""
    text = canonical_json({"source": source_fingerprint, "format": fmt, "options": options, "layout": LAYOUT_VERSION})
    return hashlib.sha256(text.encode()).hexdigest()


def export_identity(source: Path, source_fingerprint: str, fmt: str, options: dict[str, Any]) -> dict[str, Any]:
    """What an export's record says it is an export of (a refusal compares them with the record at ``--out``)."""
    return {
        "format": fmt,
        "options": options,
        "source": {"path": recorded_name(str(source)), "fingerprint": source_fingerprint},
    }


def write_record(directory: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Write ``export.json`` atomically (the same way as an output's manifest); returns what it holds."""
    written = {"packcli_version": __version__, "layout_version": LAYOUT_VERSION, **record}
    write_manifest(directory, written, EXPORT_NAME)
    return written


def existing_export(target: Path, fingerprint: str, shown: Path, *, asked: dict[str, Any], overwrite: bool) -> Existing:
    """What ``target`` holds: "absent", "same" (a complete export of this fingerprint) or "other" (another export,
    which only ``overwrite`` replaces; ``asked``, the :func:`export_identity` of this one, says how they differ).

    Raises:
        PackcliError: another export is there and ``overwrite`` is off (saying what differs); or ``target`` is not
            a directory, or is a pack output, or holds files but no readable ``export.json``, or a file the export
            does not list: such a directory is never replaced.
    """
    names = directory_names(target, shown)
    if not names:
        return "absent"
    try:
        record = json.loads((target / EXPORT_NAME).read_text(encoding="utf-8"))
        files = {str(entry["file"]): int(entry["bytes"]) for entry in record["files"]}
        same = record["fingerprint"] == fingerprint
    except (OSError, ValueError, KeyError, TypeError):
        if MANIFEST_NAME in names and EXPORT_NAME not in names:
            raise PackcliError(
                f"is a packcli output ({MANIFEST_NAME}), not an export: an export never replaces one, even with "
                "--overwrite; choose another --out",
                shown,
            ) from None
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
    present = directory_sizes(target)
    broken = next((name for name, size in files.items() if present.get(name) != size), None)
    if same and broken is None:
        return "same"
    if not overwrite:
        raise PackcliError(_difference(record, asked, broken if same else None), shown)
    return "other"


def _difference(record: dict[str, Any], asked: dict[str, Any], broken: str | None) -> str:
    """Why the export ``record`` describes is not the one ``asked`` (``broken``: the file of an export of the same
    fingerprint that is missing or of another size), and what to do."""
    if broken is not None:
        return (
            f"holds an incomplete or damaged export of this output, format and options ({broken} is missing or not "
            f"the size {EXPORT_NAME} lists); pass --overwrite to write it again"
        )
    there, now = record.get("source") or {}, asked["source"]
    differences = []
    if record.get("format") != asked["format"]:
        differences.append(f"another format ({record.get('format')} there, {asked['format']} now)")
    if there.get("fingerprint") != now["fingerprint"]:
        differences.append(
            f"another packed output ({there.get('path')} there, {now['path']} now; fingerprints "
            f"{str(there.get('fingerprint'))[:12]} and {now['fingerprint'][:12]})"
        )
    if record.get("options") != asked["options"]:
        differences.append(
            f"other export options ({_options(record.get('options'))} there, {_options(asked['options'])} now)"
        )
    if record.get("layout_version") != LAYOUT_VERSION:
        differences.append(
            f"another export layout ({record.get('layout_version')} there, {LAYOUT_VERSION} now: another packcli "
            "version wrote it)"
        )
    said = ", ".join(differences) or "its fingerprint differs"
    return f"holds another export: {said}; pass --overwrite to replace it, or choose another --out to keep both"


def _options(options: Any) -> str:
    """Export options in a message: ``name=value`` pairs, or "none"."""
    if not isinstance(options, dict) or not options:
        return "none"
    return ", ".join(f"{name}={value}" for name, value in sorted(options.items()))
