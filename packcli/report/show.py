"""One packed row, decoded: its documents separated and numbered (from ``cu_seqlens``), the supervised tokens of a
fine-tuning output marked (``labels`` not -100), positions on request. The quickest look at whether masks are right.

A row of two documents, the second with a supervised answer, prints (outside a terminal) as::

    packed/ row 0 of 12 (shard-00000.arrow row 0): 2 documents, 9 of 16 tokens
    -- document 1: tokens 0-3 (4 tokens), from notes.jsonl:3
    Hello world<|endoftext|>
    -- document 2: tokens 4-8 (5 tokens), from qa.jsonl:12, piece 2 of 2
    Q: 2+2? A:⟦ 4<|endoftext|>⟧

Each document's source comes from its shard's source index (:func:`~packcli.format.sidecars.read_sources`; none
for an output packed before it existed), and :func:`find_source` goes the other way: from ``FILE:LINE`` to the
rows where that record went.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from rich.table import Table
from rich.text import Text

from packcli.encode.tokenizer import LoadedTokenizer, load_tokenizer
from packcli.errors import PackcliError, UsageError, one_line
from packcli.format.columns import IGNORE_INDEX, LABELS_COLUMN, POSITIONS_COLUMN
from packcli.format.listing import SHARD_ERRORS, check_listing, unreadable_shard
from packcli.format.manifest import read_manifest, shard_path
from packcli.format.replaced import reads_output
from packcli.format.schema import row_position_ids
from packcli.format.shards import flat_list_column, open_shard
from packcli.format.sidecars import Sources, read_sources
from packcli.read.stdin import STDIN_NAME
from packcli.report.terminal import console, count

__all__ = ["decode_row", "find_source", "output_tokenizer", "print_found", "print_row", "read_row"]

_ACTED_ON = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")

OPEN_MARK, CLOSE_MARK = "⟦", "⟧"  # around supervised tokens when colour is not available


@dataclass(frozen=True)
class Row:
    """One row of a packed output and where it lives."""

    index: int
    rows: int  # rows in the whole output
    shard: str
    shard_row: int
    max_len: int
    input_ids: np.ndarray
    position_ids: np.ndarray
    cu_seqlens: np.ndarray
    labels: np.ndarray | None
    sources: list[dict[str, Any]] | None  # each document's source (None: the output keeps no source index)


@reads_output
def read_row(out: Path, index: int) -> tuple[dict[str, Any], Row]:
    """The manifest and row ``index`` (0-based, over all shards in manifest order) of the output ``out``."""
    manifest = read_manifest(out)
    check_listing(out, manifest)  # the rows the entries list are the output's: a damaged listing is no range
    counts = np.array([int(shard["rows"]) for shard in manifest["shards"]], dtype=np.int64)
    total = int(counts.sum())
    if not 0 <= index < total:
        raise UsageError(f"--row {index} is out of range: {out} holds rows 0 to {total - 1}")
    shard = int(np.searchsorted(np.cumsum(counts), index, side="right"))
    shard_row = index - int(counts[:shard].sum())
    name = manifest["shards"][shard]["file"]
    table, first = _shard_row(shard_path(out, name), shard_row)  # first: the row's first document in the shard

    def column(column_name: str) -> np.ndarray:
        return np.asarray(table.column(column_name)[0].values.to_numpy(zero_copy_only=False), dtype=np.int64)

    labels = column(LABELS_COLUMN) if LABELS_COLUMN in table.column_names else None
    sources = read_sources(out, manifest["shards"][shard])
    cu_seqlens = column("cu_seqlens")
    row = Row(
        index,
        total,
        name,
        shard_row,
        int(manifest["max_len"]),
        column("input_ids"),
        column(POSITIONS_COLUMN) if POSITIONS_COLUMN in table.column_names else row_position_ids(cu_seqlens),
        cu_seqlens,
        labels,
        None if sources is None else [_source(sources, k) for k in range(first, first + len(cu_seqlens) - 1)],
    )
    return manifest, row


def _shard_row(path: Path, row: int) -> tuple[pa.Table, int]:
    """Row ``row`` of the shard at ``path`` and the documents of the rows before it in the shard, reading its record
    batches only up to the one holding it (from a URL, nothing of the shard past that batch is fetched).

    Raises:
        PackcliError: the shard cannot be read, or holds fewer rows than its manifest entry says (naming it).
    """
    first = documents = 0
    try:
        for batch in open_shard(path):
            if row < first + batch.num_rows:
                documents += int(_documents_per_row(batch)[: row - first].sum())
                return pa.Table.from_batches([batch.slice(row - first, 1)]), documents
            documents += int(_documents_per_row(batch).sum())
            first += batch.num_rows
    except SHARD_ERRORS as exc:
        raise unreadable_shard(path, exc) from None
    raise PackcliError(f"holds {first} rows, fewer than its manifest entry says: run packcli verify", path)


def _documents_per_row(batch: pa.RecordBatch) -> np.ndarray:
    """Each row's documents in a batch of a shard, from the offsets of its ``cu_seqlens`` (no token is read)."""
    _, offsets = flat_list_column(pa.chunked_array([batch.column("cu_seqlens")]))
    return np.diff(offsets) - 1


def _shard_documents_per_row(path: Path) -> np.ndarray:
    """Each row's documents in the shard at ``path``, batch by batch (from a URL, one batch in memory at a time)."""
    counts = [_documents_per_row(batch) for batch in open_shard(path)]
    return np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)


def _source(sources: Sources, k: int) -> dict[str, Any]:
    """Document ``k`` of a shard's source index as JSON: input, record, piece (from 0), pieces, and in words."""
    return {
        "input": sources.inputs[int(sources.input[k])],
        "record": int(sources.record[k]),
        "piece": int(sources.piece[k]),
        "pieces": int(sources.pieces[k]),
        "text": sources.describe(k),
    }


@reads_output
def find_source(out: Path, spec: str) -> list[dict[str, Any]]:
    """Where the record ``FILE:LINE`` went: each document (piece) of the output that came from it, with its row
    (over all shards), shard, row in the shard and number in the row (from 1). ``FILE`` is an input's name as the
    manifest gives it, the path of a local file, the end of a name after a ``/``, or ``-`` for standard input.

    Raises:
        UsageError: ``spec`` is not ``FILE:LINE`` with a line from 1.
        PackcliError: the output keeps no source index, or no document came from that record.
    """
    file, _, line = spec.rpartition(":")
    if not file or not (line.isascii() and line.isdigit()) or int(line) < 1:
        raise UsageError(f"--source {spec!r} is not FILE:LINE (an input's name and a line or row from 1)")
    manifest = read_manifest(out)
    wanted = {STDIN_NAME} if file == "-" else {file, str(Path(file).resolve())}  # "-": as the command read it
    found: list[dict[str, Any]] = []
    rows_before = 0
    for entry in manifest["shards"]:
        sources = read_sources(out, entry)
        if sources is None:
            raise PackcliError(
                f"{entry['file']} keeps no source index (packed before packcli kept one): repack it", out
            )
        names = [name in wanted or name.endswith(f"/{file}") for name in sources.inputs]
        match = np.flatnonzero(np.array(names, dtype=bool)[sources.input] & (sources.record == int(line)))
        if len(match):
            per_row = _shard_documents_per_row(shard_path(out, entry["file"]))
            ends = np.cumsum(per_row)
            for k in match.tolist():
                row = int(np.searchsorted(ends, k, side="right"))
                number = k - int(ends[row] - per_row[row]) + 1
                at = {"row": rows_before + row, "shard": entry["file"], "shard_row": row, "document": number}
                found.append({**at, "source": _source(sources, k)})
        rows_before += int(entry["rows"])
    if not found:
        raise PackcliError(
            f"no document comes from {spec}: no such input or record, or it was empty, dropped or a bad record", out
        )
    return sorted(found, key=lambda place: (place["source"]["piece"], place["row"], place["document"]))


def print_found(found: list[dict[str, Any]], title: str) -> None:
    """Where a record went, one line per document (piece)."""
    out = console()
    for place in found:
        out.print(
            Text(
                f"{one_line(place['source']['text'])}: {title} row {place['row']:,} ({place['shard']} row "
                f"{place['shard_row']:,}), document {place['document']}"
            )
        )


def output_tokenizer(manifest: dict[str, Any], spec: str | None) -> LoadedTokenizer:
    """The tokenizer the output was packed with (or ``spec``), refused when its sha256 differs.

    Raises:
        UsageError: the output was packed from token ids without a tokenizer and ``spec`` names none (decoding
            them with the bundled GPT-2 would show text the ids never meant).
        PackcliError: the tokenizer is not the one the output was packed with.
    """
    options = manifest.get("options", {})
    expected = manifest.get("tokenizer", {}).get("sha256")
    if spec is None and options.get("ids_field") and not expected:
        raise UsageError(
            "this output was packed from token ids without a tokenizer: show decodes ids with one, so pass the "
            "tokenizer they come from with --tokenizer"
        )
    loaded = load_tokenizer(spec if spec is not None else options.get("tokenizer"), options.get("eos_token"))
    if expected and loaded.sha256 != expected:
        raise PackcliError(
            f"tokenizer {loaded.name} (sha256 {loaded.sha256[:12]}) is not the one this output was packed with "
            f"(sha256 {expected[:12]}); pass that one with --tokenizer"
        )
    return loaded


def decode_row(row: Row, tokenizer: LoadedTokenizer, positions: bool = False) -> dict[str, Any]:
    """The row as JSON: per document its number (from 1), token range and text in segments of equal supervision
    (``supervised`` is null without labels); with ``positions`` also every token's position, id and text.

    Raises:
        UsageError: an id of the row is outside the tokenizer's vocabulary (ids packed without a tokenizer, shown
            with another): decoding would drop it silently.
    """
    _check_vocabulary(row, tokenizer)
    decode = tokenizer.tokenizer.decode_batch
    supervised = None if row.labels is None else row.labels != IGNORE_INDEX
    specials = _SpecialTexts(tokenizer)
    documents = []
    for number, (start, end) in enumerate(zip(row.cu_seqlens[:-1].tolist(), row.cu_seqlens[1:].tolist()), start=1):
        if supervised is None:
            cuts = [start, end]
        else:
            changes = np.flatnonzero(np.diff(supervised[start:end].astype(np.int8))) + start + 1
            cuts = [start, *changes.tolist(), end]
        spans = list(zip(cuts[:-1], cuts[1:]))
        texts = decode([row.input_ids[a:b].tolist() for a, b in spans], skip_special_tokens=False)
        document: dict[str, Any] = {
            "number": number,
            "source": None if row.sources is None else row.sources[number - 1],
            "start": start,
            "length": end - start,
            "segments": [
                {"text": text, "tokens": b - a, "supervised": None if supervised is None else bool(supervised[a])}
                for (a, b), text in zip(spans, texts)
            ],
            "literal_specials": specials.held_as_text(row.input_ids[start:end]),
        }
        if positions:
            pieces = decode([[token] for token in row.input_ids[start:end].tolist()], skip_special_tokens=False)
            document["tokens"] = [
                {
                    "position": int(row.position_ids[at]),
                    "id": int(row.input_ids[at]),
                    "text": piece,
                    "supervised": None if supervised is None else bool(supervised[at]),
                }
                for at, piece in zip(range(start, end), pieces)
            ]
        documents.append(document)
    return {
        "row": row.index,
        "rows": row.rows,
        "shard": row.shard,
        "shard_row": row.shard_row,
        "max_len": row.max_len,
        "tokens": len(row.input_ids),
        "supervised_tokens": None if supervised is None else int(supervised.sum()),
        "documents": documents,
    }


class _SpecialTexts:
    """Finds special-token text held as plain text: a user's literal ``<|im_end|>`` tokenized as text decodes exactly
    as the special id does, so ``show`` names it apart."""

    def __init__(self, tokenizer: LoadedTokenizer) -> None:
        decoder = tokenizer.tokenizer.get_added_tokens_decoder()
        self.ids = np.array([id for id, token in decoder.items() if token.special and token.content], dtype=np.int64)
        texts = sorted({decoder[id].content for id in self.ids.tolist()}, key=len, reverse=True)
        self.pattern = re.compile("|".join(map(re.escape, texts))) if texts else None
        self.decode = tokenizer.tokenizer.decode_batch

    def held_as_text(self, ids: np.ndarray) -> list[str]:
        """The special-token texts that the runs of ``ids`` between special ids decode to, in order."""
        if self.pattern is None or not len(ids):
            return []
        special = np.isin(ids, self.ids)
        runs = np.split(ids, np.flatnonzero(np.diff(special.astype(np.int8))) + 1)
        plain = [run.tolist() for run in runs if not np.isin(run[0], self.ids)]
        return [found for text in self.decode(plain, skip_special_tokens=False) for found in self.pattern.findall(text)]


def _check_vocabulary(row: Row, tokenizer: LoadedTokenizer) -> None:
    outside = np.flatnonzero(row.input_ids >= tokenizer.vocab_size)
    if len(outside):
        at = int(outside[0])
        raise UsageError(
            f"row {row.index} token {at} (id {int(row.input_ids[at])}) is outside the vocabulary of tokenizer "
            f"{tokenizer.name} ({tokenizer.vocab_size:,} ids): pass the tokenizer these ids come from with --tokenizer"
        )


def print_row(decoded: dict[str, Any], title: str) -> None:
    """The decoded row for people: a header, then each document's text, or its tokens with ``positions``."""
    out = console()
    colour = out.is_terminal
    out.print(
        f"[bold]{title}[/bold] row {decoded['row']:,} of {decoded['rows']:,} ({decoded['shard']} row "
        f"{decoded['shard_row']:,}): {count(len(decoded['documents']), 'document')}, {decoded['tokens']:,} of "
        f"{decoded['max_len']:,} tokens"
    )
    if decoded["supervised_tokens"] is not None:
        how = "in green" if colour else f"between {OPEN_MARK} and {CLOSE_MARK}"
        out.print(
            f"supervised tokens (labels not -100: loss is taken on them), {decoded['supervised_tokens']:,}, {how}"
        )
    for document in decoded["documents"]:
        end = document["start"] + document["length"] - 1
        source = "" if document["source"] is None else f", from {one_line(document['source']['text'])}"
        out.print(
            Text(
                f"-- document {document['number']}: tokens {document['start']}-{end} ({document['length']} tokens)"
                + _visible(source)
            ),
            style="bold cyan",
        )
        for literal in dict.fromkeys(document["literal_specials"]):
            out.print(Text(f"   text {_visible(repr(literal))} here is plain text, not a special token"))
        if "tokens" in document:
            out.print(_token_table(document["tokens"], decoded["supervised_tokens"] is not None))
            continue
        text = Text()
        for segment in document["segments"]:
            shown = _visible(segment["text"])
            if segment["supervised"] and colour:
                text.append(shown, style="bold green")
            elif segment["supervised"]:
                text.append(f"{OPEN_MARK}{shown}{CLOSE_MARK}")
            else:
                text.append(shown)
        out.print(text)


def _visible(text: str) -> str:
    """``text`` with what a terminal would act on rather than show (control characters but newline and tab, escape
    sequences, bidi overrides) written as its escape, ``\\x1b``: a document cannot recolour, overwrite or reorder
    what ``show`` prints, nor lose a character to it."""
    return _ACTED_ON.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)


def _token_table(tokens: list[dict[str, Any]], supervised: bool) -> Table:
    table = Table(box=None, pad_edge=False)
    for column in ("position", "id", "token", *(["supervised"] if supervised else [])):
        table.add_column(column, justify="right" if column in ("position", "id") else "left")
    for token in tokens:
        mark = ["yes" if token["supervised"] else "-"] if supervised else []
        table.add_row(str(token["position"]), str(token["id"]), repr(token["text"]), *mark)
    return table
