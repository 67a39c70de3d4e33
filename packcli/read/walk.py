"""The local files a directory or a glob names. Invariants: each real directory is walked once (a link to a
directory is followed where it leads somewhere new, never round a loop of links); what packcli wrote (an output, a
run's staging or resume area, an export) is never input and is named once in a warning; a Hugging Face
``save_to_disk`` folder gives only the Arrow files its ``state.json`` lists.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from packcli.errors import PackcliError
from packcli.format.manifest import EXPORT_NAME, is_output

__all__ = ["glob_inputs", "is_export", "packcli_home", "walk_directory"]

Warn = Callable[[str], None]
Readable = Callable[[Path], bool]  # whether packcli reads a file of this name (inputs.input_format)


def walk_directory(root: Path, readable: Readable, unread: list[Path], warn: Warn) -> list[Path]:
    """The files packcli reads under ``root``, sorted; the others (a pipe or a broken link among them) go to
    ``unread``. Symlinked directories are followed once; packcli outputs, staging directories and exports are
    skipped, with a warning."""
    found: list[Path] = []
    seen: set[str] = set()
    for directory, subdirectories, names in os.walk(root, followlinks=True):
        here = Path(directory)
        real = os.path.realpath(here)
        if real in seen:  # a symlink back to a directory already read
            subdirectories[:] = []
            continue
        seen.add(real)
        kept = []
        for name in sorted(subdirectories):
            if made := made_by_packcli(here / name):
                warn(f"skipping {here / name}: {made}, not input")
            else:
                kept.append(name)
        subdirectories[:] = kept
        metadata, data_files = _saved_dataset(here)
        for name in sorted(names):
            path = here / name
            if name in metadata or _is_staging(name):
                continue
            if home := _linked_home(path):
                warn(_link_skipped(path, home))
            elif path.is_file() and readable(path) and (data_files is None or name in data_files):
                found.append(path)
            else:
                unread.append(path)
    return sorted(found)


def glob_inputs(pattern: str, readable: Readable, unread: list[Path], warn: Warn) -> list[Path]:
    """The files packcli reads that ``pattern`` matches (a matched directory: the files under it), sorted; the
    other files matched go to ``unread``. A match inside a packcli output (or staging area, or export) below the
    pattern's fixed part is skipped: the output is named once in a warning, as a directory walk names it."""
    top = Path(*_parts(pattern)[: _first_magic(pattern)])  # Path() is the working directory
    known: dict[Path, str | None] = {}
    said: dict[str, None] = {}  # each warning once: a final ``**`` matches a directory and what it holds
    found: list[Path] = []
    for match in sorted(Path(name) for name in _glob(pattern)):
        if home := packcli_home(match, top, known):
            said.setdefault(f"skipping {home[0]}: {home[1]}, not input")
        elif home := _linked_home(match):
            said.setdefault(_link_skipped(match, home))
        elif match.is_dir():
            found.extend(walk_directory(match, readable, unread, lambda message: said.setdefault(message)))
        else:  # a pipe or a broken link is no file to read: named with the files not read
            (found if match.is_file() and readable(match) else unread).append(match)
    for message in said:
        warn(message)
    return found


def packcli_home(path: Path, top: Path, known: dict[Path, str | None] | None = None) -> tuple[Path, str] | None:
    """The directory packcli wrote that holds ``path`` (or is it), looked for from ``path`` up to ``top``, and what
    it is (as a skipping warning names it); None where none does. ``known`` keeps the answers for directories
    already asked about."""
    known = {} if known is None else known
    for directory in (path, *path.parents):
        if directory not in known:
            known[directory] = made_by_packcli(directory) if directory.is_dir() else None
        if made := known[directory]:
            return directory, made
        if directory == top:
            break
    return None


def _linked_home(path: Path) -> tuple[Path, str] | None:
    """Where a symbolic link to a file leads into a directory packcli wrote (a link kept among a corpus' files to a
    shard of an output elsewhere): that directory and what it is; None for any other path."""
    if not (path.is_symlink() and path.is_file()):  # a broken link or a loop is a file not read, as before
        return None
    real = Path(os.path.realpath(path))
    return packcli_home(real, real.parent)


def _link_skipped(path: Path, home: tuple[Path, str]) -> str:
    return f"skipping {path}: a link into {home[1]} ({home[0]}), not input"


def made_by_packcli(directory: Path) -> str | None:
    """What ``directory`` is, as a skipping warning names it, when packcli wrote it (an export; an output or a
    run's staging or resume area, by its name or, for a link, by where it leads); None for any other directory."""
    if is_export(directory):
        return "a packcli export"
    names = (directory.name, os.path.basename(os.path.realpath(directory)))
    if any(_is_staging(name) for name in names) or is_output(directory):
        return "a packcli output"
    return None


def is_export(directory: Path) -> bool:
    """Whether ``directory`` is a ``packcli export`` (its ``export.json``; its files are a trainer's, never input)."""
    return (directory / EXPORT_NAME).is_file() and not is_output(directory)


def _is_staging(name: str) -> bool:
    """A run's staging directory, resume area (or lock) beside its output: ``.NAME.packcli-...``."""
    return name.startswith(".") and ".packcli-" in name


def _parts(pattern: str) -> list[str]:
    """A pattern's components (an absolute one's first is the root, ``/``)."""
    parts = pattern.split(os.sep)
    return [os.sep, *parts[1:]] if pattern.startswith(os.sep) else parts


def _first_magic(pattern: str) -> int:
    """The index of the first component of ``pattern`` that holds a wildcard."""
    return next(index for index, part in enumerate(_parts(pattern)) if glob.has_magic(part))


def _glob(pattern: str) -> Iterator[str]:
    """What ``glob.glob(pattern, recursive=True)`` matches, less its wander round loops of links: its ``**``
    follows a link to a directory wherever it leads, so a link to a parent took it some 40 levels deep, naming
    every file again at each level (two such links: forever). Here a ``**`` walks each real directory once."""
    parts = _parts(pattern)
    if "**" not in parts:
        yield from glob.glob(pattern, recursive=True)
        return
    at = parts.index("**")
    head, rest = os.path.join(*parts[:at]) if at else "", parts[at + 1 :]
    for top in glob.glob(head) if head else [""]:
        if top and not os.path.isdir(top):
            continue
        for directory in _directories(top):
            if rest == [""]:  # ``**/``: the directories
                yield os.path.join(directory, "")
            elif rest:
                yield from _glob(os.path.join(glob.escape(directory), *rest))
            else:  # a final ``**``: the directory itself, and all it holds
                yield from ([os.path.join(directory, "")] if directory == top and top else [])
                yield from (os.path.join(directory, name) for name in _listed(directory, dirs_only=False))


def _directories(top: str) -> list[str]:
    """``top`` and every directory a ``**`` matches under it (none hidden; links to directories followed), each
    real directory once, under the spelling that sorts first (the one a sorted ``glob.glob`` lists first)."""
    found: list[str] = []
    seen: set[str] = set()
    stack = [top]
    while stack:
        directory = stack.pop()
        real = os.path.realpath(directory or os.curdir)
        if real in seen:
            continue
        seen.add(real)
        found.append(directory)
        stack.extend(os.path.join(directory, name) for name in reversed(_listed(directory, dirs_only=True)))
    return found


def _listed(directory: str, dirs_only: bool) -> list[str]:
    """The names in ``directory`` that a ``**`` matches (not hidden; only directories, where asked), sorted; none
    where it cannot be listed (as ``glob`` has it)."""
    try:
        with os.scandir(directory or os.curdir) as entries:
            names = [entry.name for entry in entries if not entry.name.startswith(".")]
    except OSError:
        return []
    return sorted(name for name in names if not dirs_only or os.path.isdir(os.path.join(directory, name)))


def _saved_dataset(directory: Path) -> tuple[frozenset[str], frozenset[str] | None]:
    """For a Hugging Face ``save_to_disk`` folder: its metadata file names and the data files its ``state.json``
    lists; else (no names, None). A DatasetDict (a folder of such folders, one per split) is refused: packing every
    split together would mix evaluation data into training data."""
    if (directory / "dataset_dict.json").is_file():
        splits = sorted(entry.name for entry in directory.iterdir() if (entry / "state.json").is_file())
        example = directory / (splits[0] if splits else "train")
        raise PackcliError(
            f"is a Hugging Face DatasetDict (splits: {', '.join(splits) or 'none'}); pass one split's folder, "
            f"e.g. {example}",
            directory,
        )
    state, info = directory / "state.json", directory / "dataset_info.json"
    if not (state.is_file() and info.is_file()):
        return frozenset(), None
    try:
        listed = json.loads(state.read_bytes())["_data_files"]
        data_files = frozenset(str(entry["filename"]) for entry in listed)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PackcliError(f"cannot read the Hugging Face dataset state ({exc})", state) from None
    for name in sorted(data_files):
        if not (directory / name).is_file():
            raise PackcliError(f"Hugging Face dataset data file {name}, listed in state.json, is missing", directory)
    return frozenset((state.name, info.name)), data_files
