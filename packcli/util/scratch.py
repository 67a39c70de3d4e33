"""Node-local scratch: where a run stages what it uploads or keeps a partition's token store, found again by name
by the next run on the same output after a kill -9."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from packcli.errors import PackcliError

__all__ = ["part_scratch", "remove_part_scratch", "scratch_directory", "scratch_key"]


def scratch_directory() -> Path:
    """Node-local scratch for what a run stages before uploading: ``PACKCLI_SCRATCH`` (made where it does not exist
    yet), else the temporary directory.

    Raises:
        PackcliError: ``PACKCLI_SCRATCH`` names something that is not a directory, or one it cannot make.
    """
    named = os.environ.get("PACKCLI_SCRATCH")
    if not named:
        return Path(tempfile.gettempdir())
    if os.path.exists(named) and not os.path.isdir(named):
        raise PackcliError(
            f"PACKCLI_SCRATCH={named} is not a directory: name a directory on node-local disk, or unset it"
        )
    try:
        os.makedirs(named, exist_ok=True)  # a path under a file, a link to nowhere: said here, not by a part
    except OSError as exc:
        raise PackcliError(
            f"PACKCLI_SCRATCH={named} cannot be made a directory ({exc.strerror or exc}): name a directory on "
            "node-local disk, or unset it"
        ) from None
    return Path(named)


def scratch_key(location: Path) -> str:
    """The name of an output (or a run's parts) in node-local scratch: the next run on it finds what a killed run
    left there. Of the path's bytes as the system holds them (a name need not be UTF-8); a UTF-8 name's are its
    UTF-8."""
    return hashlib.sha256(os.fsencode(str(location))).hexdigest()[:16]  # str: a URL has no fspath


def part_scratch(owner: Path, part: str) -> Path:
    """The node-local directory of the part named ``part`` (``part-00003``) of the output (or parts area)
    ``owner``, whichever run stages it."""
    return scratch_directory() / f"packcli-{scratch_key(owner)}-{part}"


def remove_part_scratch(owner: Path) -> None:
    """Remove every part's node-local directory of ``owner``: its parts are gone, and no run will resume them."""
    pattern = part_scratch(owner, "*")
    for directory in pattern.parent.glob(pattern.name):
        shutil.rmtree(directory, ignore_errors=True)
