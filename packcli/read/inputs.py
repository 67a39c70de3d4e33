"""Find the input files (files, directories, globs) and stream the chosen fields of their records in batches,
counting (or rejecting) bad records. Every reader yields the same ``FieldBatch`` whatever the format.

Nothing is skipped silently: a file found in a directory (or by a glob) that packcli does not read is named in a
warning and counted; a packcli output, staging directory or export found inside an input directory is never read as
input (and said so); a Hugging Face ``save_to_disk`` folder is read through the Arrow files its ``state.json`` lists.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from packcli.errors import BadRecordError, PackcliError, UsageError
from packcli.format.manifest import EXPORT_NAME, is_output, recorded_name
from packcli.read.fields import Convert, Field, FieldBatch, ReadCounts
from packcli.read.jsonl import read_json
from packcli.read.streams import COMPRESSIONS, Span
from packcli.read.tables import read_arrow, read_parquet, unmarked_batches
from packcli.read.unread import not_read
from packcli.read.walk import glob_inputs, is_export, packcli_home, walk_directory
from packcli.storage import UrlPath, is_url, location
from packcli.util.files import why_absent

__all__ = [
    "SUPPORTED_SUFFIXES",
    "FileIdentity",
    "InputFile",
    "InputSlice",
    "Inputs",
    "Spool",
    "describe_inputs",
    "file_identity",
    "find_inputs",
    "input_changes",
    "input_format",
    "read_records",
]

JSON_SUFFIXES = tuple(kind + packed for kind in (".jsonl", ".ndjson", ".json") for packed in ("", *COMPRESSIONS))
SUPPORTED_SUFFIXES = (*JSON_SUFFIXES, ".parquet", ".arrow")
FORMATS_READ = ".jsonl, .ndjson or .json (each also .gz, .zst, .bz2 or .xz), .parquet, .arrow"

Warn = Callable[[str], None]
FileIdentity = tuple[int, int] | str  # a file's device and inode, an object's URL: see file_identity
_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


@dataclass(frozen=True)
class Spool:
    """A temporary file that stands for an input given another way (standard input, a ``datasets.Dataset``): the
    file, the sha256 of its bytes (its identity: the same bytes again are the same input) and the name messages and
    the manifest give it."""

    path: Path
    digest: str
    name: str

    def named(self, text: str) -> str:
        """``text`` with the temporary file named as the user knows it, of its own type (a warning that is a
        :class:`~packcli.errors.DataLossNotice` stays one)."""
        return type(text)(text.replace(str(self.path), self.name))

    def rename(self, error: PackcliError) -> None:
        """Name the temporary file in ``error`` as the user knows it."""
        error.message = self.named(error.message)
        error.path = None if error.path is None else self.named(error.path)


@dataclass(frozen=True)
class InputFile:
    """One input file as a value, its stat taken once, so that the fingerprint, the manifest and the resume facts
    describe the same file: the path read, the name messages and the manifest give it (``<stdin>`` for the spool
    of standard input; a name that is no UTF-8 with its bytes escaped, :func:`recorded_name`), its size and
    mtime, for standard input the sha256 of its bytes (its identity), and for an object in a store (a URL) its
    ETag, which stands for its mtime where the store gives one."""

    path: Path
    name: str
    size: int
    mtime_ns: int
    digest: str | None = None
    etag: str | None = None

    @classmethod
    def of(cls, path: Path, stdin: Spool | None = None) -> InputFile:
        """Describe ``path`` as it is now (an object: one request to the store); a spool by its digest."""
        if isinstance(path, UrlPath):
            from packcli.storage.objects import object_info

            info = object_info(str(path))
            return cls(path, str(path), info.size, info.mtime_ns, etag=info.etag)
        stat = path.stat()
        if stdin is not None and path == stdin.path:
            return cls(path, stdin.name, stat.st_size, stat.st_mtime_ns, stdin.digest)
        return cls(path, recorded_name(str(path)), stat.st_size, stat.st_mtime_ns)

    @property
    def version(self) -> str | int:
        """What tells this version of the input from another: the object's ETag, else the mtime."""
        return self.etag if self.etag is not None else self.mtime_ns

    def change(self) -> str | None:
        """How the input differs now from when it was described, in words (``was removed``, ``changed (ETag A
        then, B now)``), or None. A spool is the run's own copy of its input: never changed by another."""
        if self.digest is not None:
            return None
        try:
            now = InputFile.of(self.path)  # one request for an object; a second only where it fails
        except (OSError, PackcliError):
            if self.path.exists():
                raise
            return "was removed"
        if (now.size, now.version) == (self.size, self.version):
            return None
        if self.etag is not None:
            return f"changed (ETag {self.etag} then, {now.etag} now)"
        return f"changed ({self.size:,} bytes then, {now.size:,} now)" if now.size != self.size else "changed"


OBJECTS_AT_ONCE = 16  # objects described at once: each is a request to its store, far away for a cloud one


def describe_inputs(paths: Sequence[Path], stdin: Spool | None = None) -> list[InputFile]:
    """Each of ``paths`` described as it is now (:meth:`InputFile.of`), in order."""
    return _each(lambda path: InputFile.of(path, stdin), paths, paths)


def input_changes(inputs: Sequence[InputFile]) -> list[str | None]:
    """How each input differs now from its description (:meth:`InputFile.change`), in order."""
    return _each(InputFile.change, inputs, [item.path for item in inputs])


def _each(work: Callable[[_Item], _Result], items: Sequence[_Item], paths: Sequence[Path]) -> list[_Result]:
    """``work`` on every item, in order: OBJECTS_AT_ONCE at a time where any of their ``paths`` is in a store (the
    requests then wait together), one after another on local files (a stat: threads would only cost)."""
    if not any(isinstance(path, UrlPath) for path in paths):
        return [work(item) for item in items]
    with ThreadPoolExecutor(min(OBJECTS_AT_ONCE, len(items))) as pool:
        return list(pool.map(work, items))


@dataclass(frozen=True)
class InputSlice:
    """Part of one input file, as a partition plan cuts it: ``span`` is [start, end) in the file's own unit (bytes
    of a plain JSON Lines file, whose lines that start in the range belong to it; row groups of a Parquet file;
    record batches of an Arrow file); None is the whole file."""

    path: Path
    span: Span | None = None


@dataclass(frozen=True)
class Inputs:
    """The files to read (resolved, in order, each once however it is reached: by another spelling, a symbolic or a
    hard link) and the files found beside them that are not read."""

    files: list[Path]
    unread: list[Path]


def input_format(path: Path) -> str | None:
    """The format by the name's suffixes, in any case: json, parquet or arrow; None if packcli reads no such file."""
    name = path.name.lower()
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".arrow"):
        return "arrow"
    return "json" if name.endswith(JSON_SUFFIXES) else None


def find_inputs(specs: Sequence[str], warn: Warn = lambda message: None) -> Inputs:
    """Expand files, directories (searched recursively) and glob patterns; each argument's files in sorted order.

    Files that a directory or a glob holds but packcli does not read, and outputs and exports skipped inside
    directories, are named through ``warn``.

    Raises:
        PackcliError: an input does not exist, matches nothing, is a packcli output, a packcli export or a Hugging
            Face DatasetDict, or (named as a file) has a format packcli does not read.
        UsageError: an input is neither a file nor a directory (a named pipe: a stream is read as ``-``).
    """
    found: list[Path] = []
    unread: list[Path] = []
    for spec in specs:
        path = location(spec)  # a file:// URL is its path
        if is_url(spec):
            matches = _url_matches(spec, unread, warn)
        elif path.is_dir():
            if is_output(path):
                raise PackcliError("is a packcli output, not a corpus; pass the files it was packed from", path)
            if is_export(path):
                raise PackcliError(
                    f"is a packcli export ({EXPORT_NAME}), not a corpus; pass the files it was packed from", path
                )
            before = len(unread)
            matches = walk_directory(path, _readable, unread, warn)
            if not matches:
                said = f"directory holds no file packcli reads ({FORMATS_READ})"
                raise PackcliError(said + not_read(unread[before:], "; not read: "), path)
        elif path.is_file():
            if input_format(path) is None:
                raise PackcliError(f"unsupported input format; packcli reads {FORMATS_READ}", path)
            real = path.resolve()  # a link kept elsewhere to a shard is that shard
            if home := packcli_home(path, path.parent) or packcli_home(real, real.parent):
                raise PackcliError(
                    f"is part of {home[1]} ({home[0]}), not a corpus; pass the files it was packed from (a trainer "
                    "reads an output through packcli.torch or packcli export)",
                    path,
                )
            matches = [path]
        elif glob.has_magic(spec):
            before = len(unread)
            matches = glob_inputs(str(path), _readable, unread, warn)
            if not matches:
                said = f"no file that packcli reads ({FORMATS_READ}) matches this pattern"
                raise PackcliError(said + not_read(unread[before:], "; not read: "), spec)
        elif path.exists():  # a pipe (``<(zcat corpus.gz)`` names one), a device, a socket
            raise UsageError(
                "is not a regular file or directory (a pipe, a device or a socket): give a stream as standard "
                "input: `-`",
                path,
            )
        else:
            raise PackcliError(why_absent(path), path)
        found.extend(matches)
    unread = _each_once(unread)
    if unread:
        warn(
            f"{len(unread):,} file(s) found in the inputs are not read (packcli reads {FORMATS_READ}){not_read(unread)}"
        )
    unique: dict[FileIdentity, Path] = {}
    for path in found:
        unique.setdefault(file_identity(path), path.resolve())
    for path in unique.values():
        batches = None if isinstance(path, UrlPath) or input_format(path) != "arrow" else unmarked_batches(path)
        if batches is not None:
            warn(f"{path}: no end-of-stream marker: it may be cut short after {batches:,} record batch(es)")
    return Inputs(list(unique.values()), unread)


def _readable(path: Path) -> bool:
    """Whether packcli reads a file of ``path``'s name."""
    return input_format(path) is not None


def _each_once(unread: list[Path]) -> list[Path]:
    """``unread`` with each file once, however it was reached (a glob through a link to a directory, a directory
    and a glob in it): a file is its directory's real path and its name, the link itself where it is one."""
    unique: dict[str, Path] = {}
    for path in unread:
        key = str(path) if isinstance(path, UrlPath) else os.path.join(os.path.realpath(path.parent), path.name)
        unique.setdefault(key, path)
    return list(unique.values())


def file_identity(path: Path) -> FileIdentity:
    """What makes two paths one file: device and inode (a link of either kind, or another spelling, shares them);
    an object in a store has no inode, and one name: its URL, under its protocol's first name (``s3a://`` is the
    ``s3://`` store)."""
    if isinstance(path, UrlPath):
        from packcli.storage.objects import filesystem

        store, key = filesystem(str(path))
        protocol = store.protocol if isinstance(store.protocol, str) else store.protocol[0]
        return f"{protocol}://{key}"
    info = path.stat()
    return info.st_dev, info.st_ino


def _url_matches(spec: str, unread: list[Path], warn: Warn) -> list[Path]:
    """The objects packcli reads that a URL names (one object, a prefix as a directory, or a glob); the others go
    to ``unread``."""
    from packcli.storage.inputs import expand_url

    objects, named = expand_url(spec, warn)
    if named and input_format(objects[0]) is None:
        raise PackcliError(f"unsupported input format; packcli reads {FORMATS_READ}", spec)
    matches = [path for path in objects if input_format(path) is not None]
    unread.extend(path for path in objects if input_format(path) is None)
    if not matches:
        raise PackcliError(f"no object that packcli reads ({FORMATS_READ}) is there", spec)
    return list(matches)


def read_records(
    path: Path,
    fields: Sequence[Field],
    counts: ReadCounts,
    skip_bad_records: bool,
    warn: Warn,
    convert: Convert | None = None,
    span: Span | None = None,
) -> Iterator[FieldBatch]:
    """Yield the valid records of one input file (or of the ``span`` of it, see :class:`InputSlice`) in batches.

    Args:
        path: an input file of a supported format.
        fields: the fields to read; a record missing one, or with a value of the wrong kind, is bad.
        counts: updated with bad records as they are met.
        skip_bad_records: count and warn about a bad record instead of raising.
        warn: called with a one-line message for each skipped record.
        convert: applied to each record's checked values while reading (so its errors name the line); the batch
            then has one column of its results.
        span: only this part of the file; errors still name the line (or row) in the whole file.
    """

    def reject(exc: BadRecordError) -> None:
        if not skip_bad_records:
            raise exc
        counts.bad_records += 1
        warn(f"skipped bad record: {exc}")

    kind = input_format(path)
    if kind == "parquet":
        yield from read_parquet(path, fields, reject, convert, span)
    elif kind == "arrow":
        yield from read_arrow(path, fields, reject, convert, span)
    else:
        yield from read_json(path, fields, reject, convert, span)
