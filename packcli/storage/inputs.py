"""The objects an input URL names: one object, every object under a prefix, or what a glob matches, in that order (a
key holding ``*``, ``?`` or ``[`` names its object, as a local file's name does). Invariants: sorted by URL, each once;
a packcli output's objects (under a ``manifest.json``, a run's ``packcli-run-*`` prefix, a partitioned run's
``packcli-resume`` parts, a ``.packcli-*`` lock) are never input, and a warning says so.
"""

from __future__ import annotations

import glob
from collections.abc import Callable

from packcli.errors import PackcliError
from packcli.format.manifest import MANIFEST_NAME, RUN_PREFIX
from packcli.storage.objects import glob_objects, object_sizes
from packcli.storage.urls import UrlPath, location

__all__ = ["expand_url"]

RESUME_PREFIX = "packcli-resume"  # where a partitioned run to an output URL keeps its parts (packcli.run.parts)


def expand_url(spec: str, warn: Callable[[str], None]) -> tuple[list[UrlPath], bool]:
    """The objects ``spec`` (a URL) names, and whether it named one object itself.

    Raises:
        PackcliError: nothing there, or the URL is a packcli output.
    """
    root = location(spec)  # refuses credentials in the URL
    assert isinstance(root, UrlPath), "called for URLs only"
    if root.is_file():  # first, as a local file is: a key may hold the characters of a pattern
        return [root], True
    if root.is_dir():
        found = list(object_sizes(str(root)))
        if f"{root}/{MANIFEST_NAME}" in found:
            raise PackcliError("is a packcli output, not a corpus; pass the files it was packed from", spec)
    elif glob.has_magic(spec):
        found = [
            url for match in glob_objects(spec) for url in (object_sizes(match) if UrlPath(match).is_dir() else [match])
        ]
    else:
        raise PackcliError("no such object or prefix", spec)
    return _inputs_only(found, warn), False


def _inputs_only(urls: list[str], warn: Callable[[str], None]) -> list[UrlPath]:
    """``urls`` less the objects of packcli outputs (each output named once in a warning)."""
    outputs = sorted({url.rsplit("/", 1)[0] for url in urls if url.endswith("/" + MANIFEST_NAME)})
    for output in outputs:
        warn(f"skipping {output}: a packcli output, not input")
    kept = []
    for url in sorted(set(urls)):
        parts = url.split("://", 1)[-1].split("/")
        own = any(part.startswith((RUN_PREFIX, RESUME_PREFIX, ".packcli-")) for part in parts)
        if not own and not any(url.startswith(output + "/") for output in outputs):
            kept.append(UrlPath(url))
    return kept
