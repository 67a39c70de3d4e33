"""What an output directory already holds, and whether a run may skip it, replace it or must refuse it: the checks
that the local and the remote publication, and an export's record, share."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from packcli.errors import PackcliError, option
from packcli.format.integrity import directory_sizes, file_damage, listed_files
from packcli.format.manifest import EXPORT_NAME, MANIFEST_NAME, SHARD_FILE, read_manifest
from packcli.format.sidecars import SIDECAR_FILE

__all__ = [
    "DERIVED_CACHE",
    "OWN_FILE",
    "Existing",
    "directory_names",
    "existing_output",
    "in_use",
    "up_to_date",
]

# Files a packcli output may hold besides its manifest and listed shards: what an interrupted write leaves.
OWN_FILE = re.compile(
    rf"(manifest\.json|tokens|{SHARD_FILE.pattern}|{SIDECAR_FILE.pattern})\.tmp(\.mask)?|{SHARD_FILE.pattern}"
    rf"|{SIDECAR_FILE.pattern}"
)
# What ``datasets`` writes beside the files of a Dataset it maps or filters (``cache-FINGERPRINT[_RANK_of_N].arrow``,
# FINGERPRINT being the 16 hex digits of its hashes): results derived from the shards that ``packcli.pack()`` returns
# memory-mapped. Stale once the output is replaced, so they go with it when they are plain files; no other file,
# and no directory or link of such a name, is ever replaced.
DERIVED_CACHE = re.compile(r"cache-[0-9a-f]{16}(_\d{5}_of_\d{5})?\.arrow")

Existing = Literal["absent", "same", "other"]


def up_to_date(existing: Existing, overwrite: bool, shown: Path) -> bool:
    """Whether a run may skip its work (the same output is there); it may write over "other" only with
    ``overwrite``.

    Raises:
        PackcliError: another packcli output is there and ``overwrite`` is off.
    """
    if existing == "other" and not overwrite:
        raise PackcliError(
            "holds another packcli output (other inputs, tokenizer or options, or this run's output with a shard "
            "missing, not its listed size, listed twice or not listed); "
            f"pass {option('overwrite', True)} to replace it",
            shown,
        )
    return existing == "same"


def in_use(holder: str, shown: Path) -> PackcliError:
    """The refusal of a second run on an output ``holder`` is writing."""
    return PackcliError(
        f"in use by {holder}: another packcli run is writing this output; wait for it to finish or choose another "
        f"{option('out')}",
        shown,
    )


def existing_output(target: Path, fingerprint: str, shown: Path | None = None) -> Existing:
    """What ``target`` holds: "absent" (nothing, or an empty directory), "same" (a complete output of this
    fingerprint) or "other" (another packcli output, which ``--overwrite`` may replace).

    Raises:
        PackcliError: ``target`` is not a directory, or is an export, or holds a file that is not part of a packcli
            output (named, as ``shown``): such a directory is never replaced. ``datasets``' cache files derived from
            the shards (:data:`DERIVED_CACHE`) do not stop a replacement: they are removed with the old output.
    """
    shown = shown or target
    names = directory_names(target, shown)
    if not names:
        return "absent"
    try:
        manifest = read_manifest(target)
    except PackcliError as exc:
        if EXPORT_NAME in names and MANIFEST_NAME not in names:
            raise PackcliError(
                f"is a packcli export ({EXPORT_NAME}), not an output of packcli pack: pack never replaces one, even "
                f"with {option('overwrite', True)}; choose another {option('out')}",
                shown,
            ) from None
        stranger = next((name for name in names if not OWN_FILE.fullmatch(name)), names[0])
        why = f"no {MANIFEST_NAME}" if MANIFEST_NAME not in names else f"its manifest is unusable: {exc.message}"
        raise PackcliError(
            f"holds {stranger!r} but is not a packcli output ({why}); packcli replaces only its own outputs or an "
            f"empty directory: choose another {option('out')}, or remove it yourself",
            shown,
        ) from None
    if manifest["fingerprint"] == fingerprint and not file_damage(manifest, directory_sizes(target)):
        return "same"
    listed = {MANIFEST_NAME, *(item["file"] for item in listed_files(manifest))}
    foreign = next(
        (
            name
            for name in names
            if name not in listed and not (OWN_FILE.fullmatch(name) or _derived_cache(target / name))
        ),
        None,
    )
    if foreign is not None:
        raise PackcliError(
            f"holds {foreign!r}, which is not part of the packcli output there: packcli replaces only its own "
            f"outputs; move that file away or choose another {option('out')}",
            shown,
        )
    return "other"


def _derived_cache(path: Path) -> bool:
    """Whether ``path`` is a cache file ``datasets`` wrote: a plain file (not a link) named as :data:`DERIVED_CACHE`."""
    return DERIVED_CACHE.fullmatch(path.name) is not None and path.is_file() and not path.is_symlink()


def directory_names(target: Path, shown: Path) -> list[str]:
    """The names ``target`` holds, sorted; none when it does not exist.

    Raises:
        PackcliError: ``target`` exists and is not a directory (named as ``shown``).
    """
    if not target.exists():
        return []
    if not target.is_dir():
        raise PackcliError(f"exists and is not a directory; choose another {option('out')}", shown)
    return sorted(path.name for path in target.iterdir())
