"""manifest.json: the commit point of an output. Written last and atomically; sorted keys, no timestamps.

A directory whose manifest is missing or unreadable is not an output. Readers refuse a newer major format version.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from packcli import __version__
from packcli.errors import PackcliError

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
# Every total a manifest's "totals" may hold, in the order reports list them; `stats` and the `pack` summary
# read these names and no others (a test checks that a manifest holds no other).
TOTALS = (
    "documents",
    "tokens",
    "sequences",
    "input_documents",
    "input_tokens",
    "split_documents",
    "truncated_documents",
    "truncated_tokens",
    "dropped_documents",
    "dropped_tokens",
    "bad_records",
    "empty_documents",
    "supervised_tokens",
    "unsupervised_sequences",
)


def dumps(manifest: dict[str, Any]) -> str:
    """The canonical text of a manifest (or any JSON we write): sorted keys, two-space indent."""
    return json.dumps(manifest, sort_keys=True, indent=2) + "\n"


def write_manifest(directory: Path, manifest: dict[str, Any]) -> Path:
    """Write ``manifest.json`` atomically: temporary file, fsync, rename."""
    path = directory / MANIFEST_NAME
    tmp = directory / (MANIFEST_NAME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(dumps(manifest))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path


def read_manifest(directory: Path) -> dict[str, Any]:
    """Read and version-check an output's manifest.

    Raises:
        PackcliError: no manifest, unreadable JSON, or a format version this packcli cannot read.
    """
    path = directory / MANIFEST_NAME
    if not path.is_file():
        raise PackcliError(f"no {MANIFEST_NAME}: not a packcli output (run packcli pack first)", directory)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PackcliError(f"unreadable manifest: {exc}", path) from None
    if not isinstance(manifest, dict):
        raise PackcliError("manifest is not a JSON object", path)
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise PackcliError(
            f"format version {version!r} is not supported: this packcli {__version__} reads format version "
            f"{FORMAT_VERSION}; upgrade packcli or repack",
            path,
        )
    return manifest


def shard_path(directory: Path, name: object) -> Path:
    """Resolve a shard file named in a manifest, refusing any name that leaves ``directory``."""
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise PackcliError(f"shard path {name!r} leaves the output directory", directory / MANIFEST_NAME)
    return directory / name
