"""The shards a manifest lists, checked against it on open: what a reader can check cheaply before trusting it.

``verify`` hashes every byte; a reader (the loader, ``stats``) cannot afford that on every open, but an edited
manifest must not make it read a shard twice, leave one out or count rows that are not there. So on open (depth 2
of :mod:`packcli.format.integrity`): its names (every shard and sidecar file of the directory listed, once); the
shards' rows, documents and tokens add up to the totals; and each shard file holds the rows, documents and tokens its
entry says (from the record batches' lengths and the offsets of ``input_ids`` and ``cu_seqlens``: no token is
read), written for the manifest's ``max_len``, tokenizer and EOS (each shard's schema metadata repeats them: a
manifest edited there, or a shard of another output, would give the loader another padded width or pad id). Any
mismatch is one error naming the manifest key. A part a rerun reuses is checked deeper (:func:`check_intact`):
every listed file's size and sha256, and every row, too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa

from packcli.errors import PackcliError
from packcli.format.integrity import (
    Damage,
    count_damage,
    directory_sizes,
    listed_files,
    name_damage,
    size_damage,
    total_damage,
)
from packcli.format.manifest import MANIFEST_NAME, shard_path
from packcli.format.rows import check_rows
from packcli.format.schema import shard_metadata
from packcli.format.shards import list_views, read_shard
from packcli.util.files import file_sha256

__all__ = ["SHARD_ERRORS", "check_intact", "check_listing", "open_listed_shard", "unreadable_shard"]

REPACK = "the manifest was edited or the output is damaged: run packcli verify, or repack"


def check_listing(directory: Path, manifest: dict[str, Any]) -> None:
    """Each shard and sidecar file of ``directory`` listed once (:func:`~packcli.format.integrity.name_damage`),
    and the shards' rows, documents and tokens equal to ``totals.sequences``, ``totals.documents`` and
    ``totals.tokens``. ``manifest`` is validated
    already (:func:`packcli.format.manifest.read_manifest`).

    Raises:
        PackcliError: naming the manifest key at fault.
    """
    damage = name_damage(manifest, (path.name for path in directory.iterdir()))
    if damage:
        more = f" (and {len(damage) - 1} more)" if damage[1:] else ""
        _fail(directory, "shards", f"{damage[0]}{more}")
    shards = manifest["shards"]
    summed = {"sequences": sum(shard["rows"] for shard in shards), "tokens": sum(shard["tokens"] for shard in shards)}
    if all("documents" in shard for shard in shards):  # an entry's count of documents is newer than the format
        summed["documents"] = sum(shard["documents"] for shard in shards)
    for key, problem in total_damage(manifest["totals"], summed):
        _fail(directory, key, problem)


def check_intact(directory: Path, manifest: dict[str, Any]) -> None:
    """Everything a rerun checks before it reuses a part on a disk: :func:`check_listing`, each listed file (sidecars
    too) a plain file (no link) at its listed size and sha256, then each shard's counts and metadata
    (:func:`open_listed_shard`) and every row under the format's rules (:func:`~packcli.format.rows.check_rows`), so
    that neither a changed byte nor an edited manifest, nor rows rewritten with their listing, is reused.

    Raises:
        PackcliError: the first thing wrong, naming the file or the manifest key.
    """
    check_listing(directory, manifest)
    listed = listed_files(manifest)
    damage = (
        [Damage(item["file"], "link") for item in listed if shard_path(directory, item["file"]).is_symlink()]
        or size_damage(manifest, directory_sizes(directory))
        or [
            Damage(item["file"], "sha256")
            for item in listed
            if file_sha256(shard_path(directory, item["file"])) != item["sha256"]
        ]
    )
    if damage:
        raise PackcliError(f"{damage[0]}: {REPACK}", directory)
    vocab_size = manifest["tokenizer"].get("vocab_size")
    for index, shard in enumerate(manifest["shards"]):
        first = 0
        for batch in open_listed_shard(directory, manifest, index).to_batches():
            faults = check_rows(batch, manifest["max_len"], vocab_size).faults
            if faults:
                bad, what = faults[0]
                raise PackcliError(f"{shard['file']}: row {first + int(np.argmax(bad))} {what}: {REPACK}", directory)
            first += batch.num_rows


# What reading a damaged shard raises (pyarrow's errors, a file cut short, a column missing).
SHARD_ERRORS = (pa.ArrowException, OSError, KeyError, ValueError)


def unreadable_shard(path: Path, exc: BaseException) -> PackcliError:
    """The one wording of a shard that cannot be read, naming it (``exc``: one of :data:`SHARD_ERRORS`)."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
    return PackcliError(f"unreadable shard ({reason}): run packcli verify, or repack", path)


def open_listed_shard(directory: Path, manifest: dict[str, Any], index: int) -> pa.Table:
    """Memory-map the shard of manifest entry ``shards[index]`` and check its rows, documents and tokens against the
    entry, and its schema metadata against the manifest.

    Raises:
        PackcliError: the file is missing, truncated or not a shard (naming the file), or holds other counts than
            its entry or was written for another max_len, tokenizer or EOS (naming the manifest key).
    """
    shard = manifest["shards"][index]
    path = shard_path(directory, shard["file"])
    try:
        table = read_shard(path)
        tokens = documents = 0
        for batch in table.to_batches():
            views = {name: list_views(batch.column(name)) for name in batch.schema.names}  # each a list<int32>
            offsets, bounds = views["input_ids"][1], views["cu_seqlens"][1]
            tokens += int(offsets[-1]) - int(offsets[0])
            documents += int(bounds[-1]) - int(bounds[0]) - batch.num_rows  # a row of k documents: k + 1 bounds
    except SHARD_ERRORS as exc:
        raise unreadable_shard(path, exc) from None
    counted = {"rows": table.num_rows, "documents": documents, "tokens": tokens}
    for key, problem in count_damage(shard["file"], shard, counted):
        _fail(directory, f"shards[{index}].{key}", problem)
    _check_written_for(directory, manifest, shard["file"], table.schema.metadata or {})
    return table


def _check_written_for(directory: Path, manifest: dict[str, Any], name: str, metadata: dict[bytes, bytes]) -> None:
    """The shard's metadata keys equal to the manifest's, where both have them (``packcli.eos_id`` is newer, and
    a manifest's ``tokenizer.eos_id`` additive: readers need none). A shard records the EOS pack appended: none
    with ``--no-eos``, whatever EOS the tokenizer has."""
    tokenizer = manifest["tokenizer"]
    eos = manifest["options"].get("eos") is True
    appended = tokenizer.get("eos_id") if eos else None  # as verify holds it
    expected = shard_metadata(manifest["max_len"], tokenizer["sha256"], appended)
    keys = {"packcli.max_len": "max_len", "packcli.tokenizer_sha256": "tokenizer.sha256"}
    if "eos_id" in tokenizer:  # the key that says no EOS was appended, when one does
        keys["packcli.eos_id"] = "tokenizer.eos_id" if eos else "options.eos"
    for field, key in keys.items():
        found = metadata.get(field.encode())
        if found is not None and found.decode(errors="replace") != expected[field]:
            shown = "false" if key == "options.eos" else expected[field] or "null"
            written = found.decode(errors="replace") or "null"
            _fail(directory, key, f"{key} is {shown}, {name} was written with {written}")


def _fail(directory: Path, key: str, problem: str) -> NoReturn:
    raise PackcliError(f"manifest key {key!r}: {problem}: {REPACK}", directory / MANIFEST_NAME)
