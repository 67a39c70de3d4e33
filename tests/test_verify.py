"""verify: an intact output passes; each kind of damage makes it exit 1 naming the damage: checksums, rows (each
bad row found, however many), columns and their types, the manifest's totals against the shards and against each
other, stray files. And `stats` on a damaged shard names it."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import (
    as_packed_before_split_pieces,
    documented_names,
    error_line,
    json_keys,
    listed_split_pieces,
    read_jsonl,
    rewrite_split_pieces,
    run_writing_no_file_over,
    shared_path,
    write_jsonl,
)
from hypothesis import given
from hypothesis import strategies as st
from s3_server import S3Server, put_output
from typer.testing import CliRunner, Result

from packcli.cli import app
from packcli.encode.documents import add_specials
from packcli.errors import PackcliError
from packcli.format.shards import read_shard
from packcli.options import Overflow, PackOptions
from packcli.packing.overflow import apply_overflow
from packcli.report.accounting import Observed
from packcli.report.row_checks import Expected, RowChecks, ShardUnderCheck
from packcli.report.splits import SplitPieceCheck
from packcli.report.verify import verify_output
from packcli.run.driver import pack_corpus

runner = CliRunner()


@pytest.fixture
def packed(packed_text: Path) -> Path:
    """The session's packed text output (several shards; read-only: the damage tests copy it)."""
    return packed_text


def verify_damaged(source: Path, copy: Path, damage: Callable[[Path], None] | None) -> Result:
    """``packcli verify`` of a copy of ``source`` at ``copy``, damaged by ``damage`` (None: left intact)."""
    shutil.copytree(source, copy)
    if damage is not None:
        damage(copy)
    return runner.invoke(app, ["verify", str(copy)])


def edit_manifest(change: Callable[[dict], None]) -> Callable[[Path], None]:  # type: ignore[type-arg]
    def apply(out: Path) -> None:
        manifest = json.loads((out / "manifest.json").read_text())
        change(manifest)
        (out / "manifest.json").write_text(json.dumps(manifest))

    return apply


def flip_byte(out: Path) -> None:
    path = out / "shard-00001.arrow"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(out: Path) -> None:
    path = out / "shard-00000.arrow"
    path.write_bytes(path.read_bytes()[:1000])


DAMAGE = {
    "flipped byte": (flip_byte, "shard-00001.arrow: sha256 differs"),
    "truncated shard": (truncate, "shard-00000.arrow: 1000 bytes, the manifest says"),
    "missing shard": (lambda out: (out / "shard-00002.arrow").unlink(), "shard-00002.arrow: missing"),
    "edited totals": (
        edit_manifest(lambda m: m["totals"].update(tokens=m["totals"]["tokens"] + 1)),
        "totals.tokens",
    ),
    "wrong row count": (
        edit_manifest(lambda m: m["shards"][0].update(rows=m["shards"][0]["rows"] + 3)),
        "rows, the manifest says",
    ),
    "path outside": (
        edit_manifest(lambda m: m["shards"][0].update(file="../../etc/passwd")),
        "leaves the output directory",
    ),
    "listed twice": (edit_manifest(lambda m: m["shards"].append(dict(m["shards"][0]))), "listed twice"),
    "reordered shards": (
        edit_manifest(lambda m: m["shards"].insert(0, m["shards"].pop(1))),
        "shard-00000.arrow: listed out of the order packcli writes shards in",
    ),
    "unlisted shard": (edit_manifest(lambda m: m["shards"].pop()), "not listed in the manifest"),
}


def test_intact_output_passes(packed: Path) -> None:
    report = verify_output(packed)
    assert report.ok, report.problems
    assert report.shards >= 3 and report.rows > 0
    result = runner.invoke(app, ["verify", str(packed)])
    assert result.exit_code == 0 and "OK" in result.stdout


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damage_is_named(packed: Path, tmp_path: Path, kind: str) -> None:
    damage, expected = DAMAGE[kind]
    copy = tmp_path / "copy"
    result = verify_damaged(packed, copy, damage)
    assert result.exit_code == 1, result.stdout
    assert expected in result.stderr, result.stderr
    assert json.loads(runner.invoke(app, ["verify", str(copy), "--json"]).stdout)["ok"] is False


@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        ("listed twice", "'shards': shard-00000.arrow: listed twice in the manifest"),
        ("reordered shards", "'shards': shard-00000.arrow: listed out of the order packcli writes shards in"),
        ("unlisted shard", "'shards': shard-"),
        ("wrong row count", "'totals.sequences': totals.sequences is"),
    ],
)
def test_stats_refuses_an_edited_listing(packed: Path, tmp_path: Path, kind: str, problem: str) -> None:
    """A shard listed twice or left out would count its rows twice or not at all: stats checks the listing."""
    damage, _ = DAMAGE[kind]
    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)
    damage(copy)
    result = runner.invoke(app, ["stats", str(copy), "--json"])
    assert result.exit_code == 1, result.stdout
    assert error_line(result.stderr).startswith(f"error: {copy / 'manifest.json'}: manifest key "), result.stderr
    assert problem in result.stderr
    assert error_line(result.stderr) and result.stdout == ""


def test_a_failed_verify_is_one_error_line_from_the_one_error_mapper(packed: Path, tmp_path: Path) -> None:
    """verify's failure line goes through the command line's one error mapper: the same text, and one line even for
    a path holding a line break (written escaped, as every other error is); its own print wrote the break as is."""
    copy = tmp_path / "two\nlines"
    result = verify_damaged(packed, copy, flip_byte)
    assert result.exit_code == 1 and "problem: shard-00001.arrow: sha256 differs" in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    # the flipped byte may also break a split piece's digest: the count is verify's, the line the mapper's
    said = line.removeprefix(f"error: {tmp_path}/two\\nlines: ")
    assert said != line and re.fullmatch(r"[1-9]\d* problem\(s\) found", said), line


def test_verify_on_a_url_lists_every_missing_object(s3_server: S3Server, packed: Path) -> None:
    """An output in the store with two shard objects gone: verify lists both, as for a local output, and the rest
    is checked; it stopped at the first ('cannot read: no such object or prefix')."""
    fs, url = s3_server.filesystem(), f"{s3_server.bucket()}/packed"
    fs.put(f"{packed}/", url, recursive=True)
    shards = [shard["file"] for shard in json.loads((packed / "manifest.json").read_text())["shards"]]
    fs.rm([f"{url}/{shards[0]}", f"{url}/{shards[-1]}"])
    result = runner.invoke(app, ["verify", url, "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and f"error: {url}: " in result.stderr, result.output
    assert [problem for problem in report["problems"] if problem.endswith(": missing")] == [
        f"{shards[0]}: missing",
        f"{shards[-1]}: missing",
    ]
    assert report["shards"] == len(shards) and report["rows"] > 0  # the others were read and checked


def test_unknown_format_version_names_both(packed: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)
    edit_manifest(lambda m: m.update(format_version=2))(copy)
    result = runner.invoke(app, ["verify", str(copy)])
    assert result.exit_code == 1
    assert "format version 2 is not supported" in result.stderr and "reads format version 1" in result.stderr


@pytest.fixture(scope="module")
def small_outputs(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path, packed_sft: Path) -> dict[str, Path]:
    """Small real outputs (read-only): plain text split, plain text dropped, and fine-tuning records (with labels)."""
    tmp = tmp_path_factory.mktemp("verify-small")
    runs = {
        "split": PackOptions(max_len=256),
        "drop": PackOptions(max_len=256, overflow="drop"),  # type: ignore[arg-type]
    }
    for name, options in runs.items():
        pack_corpus([str(tiny_corpus)], options, tmp / name)
    outputs = {**{name: tmp / name for name in runs}, "sft": packed_sft}
    for out in outputs.values():
        assert verify_output(out).ok
    return outputs


def rewrite_shard(out: Path, table: pa.Table, name: str = "shard-00000.arrow") -> None:
    """Write ``table`` as a shard and record its new size and checksum, as a careful forger would."""
    path = out / name
    with pa.ipc.new_stream(str(path), table.schema) as writer:
        writer.write_table(table)
    manifest = json.loads((out / "manifest.json").read_text())
    entry = next(shard for shard in manifest["shards"] if shard["file"] == name)
    entry.update(bytes=path.stat().st_size, sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    (out / "manifest.json").write_text(json.dumps(manifest))


def edit_totals(**changes: Callable[[int], int]) -> Callable[[Path], None]:
    def change(manifest: dict) -> None:  # type: ignore[type-arg]
        for key, edit in changes.items():
            manifest["totals"][key] = edit(manifest["totals"][key])

    return edit_manifest(change)


def drop_labels(out: Path) -> None:
    table = read_shard(out / "shard-00000.arrow")
    rewrite_shard(out, table.drop_columns(["labels"]))


def widen_input_ids(out: Path) -> None:
    table = read_shard(out / "shard-00000.arrow")
    wide = table.column("input_ids").cast(pa.list_(pa.int64()))
    schema = table.schema.set(0, pa.field("input_ids", pa.list_(pa.int64())))
    rewrite_shard(out, table.set_column(0, schema.field(0), wide).replace_schema_metadata(table.schema.metadata))


def lower_max_len(out: Path) -> None:
    edit_manifest(lambda m: (m.update(max_len=100), m["options"].update(max_len=100)))(out)


def supervise_document_starts(out: Path) -> None:
    """Labels equal to the input id at every document start, the shard's size, sha256 and supervised_tokens fixed."""
    table = read_shard(out / "shard-00000.arrow")
    rows = table.to_pylist()
    changed = 0
    for row in rows:
        for start in row["cu_seqlens"][:-1]:
            changed += row["labels"][start] == -100
            row["labels"][start] = row["input_ids"][start]
    rewrite_shard(out, pa.Table.from_pylist(rows, schema=table.schema))
    edit_totals(supervised_tokens=lambda v: v + changed)(out)


def eos_off(out: Path) -> None:
    """The manifest edited so that nothing says an EOS was appended."""
    edit_manifest(lambda m: (m["tokenizer"].update(eos_id=None), m["options"].update(eos=False)))(out)


def edit_split_pieces(change: Callable[[list[list[int]]], None]) -> Callable[[Path], None]:
    """Edit the ``[row, index, document, piece, digest]`` entries of the first shard that has a split_pieces
    sidecar, the sidecar's size and sha256 fixed in the manifest (an edit checksums alone cannot tell)."""

    def apply(out: Path) -> None:
        manifest = json.loads((out / "manifest.json").read_text())
        shard = next(s for s in manifest["shards"] if "split_pieces" in s.get("sidecars", {}))
        sidecar = pa.ipc.open_stream((out / shard["sidecars"]["split_pieces"]["file"]).read_bytes()).read_all()
        entries = [[*entry, digest] for entry, digest in zip(listed_split_pieces(out, shard), sidecar["digest"].to_pylist())]  # fmt: skip
        change(entries)
        rewrite_split_pieces(out, shard, [entry[:4] for entry in entries], [entry[4] for entry in entries])
        (out / "manifest.json").write_text(json.dumps(manifest))

    return apply


def damage_sidecar(damage: Callable[[bytes], bytes], fix_checksum: bool) -> Callable[[Path], None]:
    """Damage the first split_pieces sidecar's bytes; with ``fix_checksum``, its size and sha256 in the manifest
    follow (a sidecar damaged where it was written)."""

    def apply(out: Path) -> None:
        manifest = json.loads((out / "manifest.json").read_text())
        sidecar = next(s["sidecars"]["split_pieces"] for s in manifest["shards"] if "sidecars" in s)
        data = damage((out / sidecar["file"]).read_bytes())
        (out / sidecar["file"]).write_bytes(data)
        if fix_checksum:
            sidecar.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        (out / "manifest.json").write_text(json.dumps(manifest))

    return apply


def flipped_middle_byte(data: bytes) -> bytes:
    return data[: len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF]) + data[len(data) // 2 + 1 :]


def edit_sources(change: Callable[[list[dict]], None]) -> Callable[[Path], None]:  # type: ignore[type-arg]
    """Edit the first shard's source index (its entries as dicts), its size and sha256 fixed in the manifest."""

    def apply(out: Path) -> None:
        manifest = json.loads((out / "manifest.json").read_text())
        sidecar = manifest["shards"][0]["sidecars"]["sources"]
        table = pa.ipc.open_stream((out / sidecar["file"]).read_bytes()).read_all()
        entries = table.to_pylist()
        change(entries)
        edited = pa.Table.from_pylist(entries, schema=table.schema)
        with pa.ipc.new_stream(str(out / sidecar["file"]), table.schema) as writer:
            writer.write_table(edited)
        data = (out / sidecar["file"]).read_bytes()
        sidecar.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        (out / "manifest.json").write_text(json.dumps(manifest))

    return apply


def swap_two_piece_numbers(pieces: list[list[int]]) -> None:
    """Swap the numbers of the first two pieces of the first document with three pieces or more (the lengths of
    both are max_len: only what the pieces hold tells them apart)."""
    counts: dict[int, int] = {}
    for entry in pieces:
        counts[entry[2]] = counts.get(entry[2], 0) + 1
    document = next(document for document, count in counts.items() if count >= 3)
    first, second = (next(entry for entry in pieces if entry[2] == document and entry[3] == k) for k in (0, 1))
    first[3], second[3] = second[3], first[3]


def swap_first_and_last_piece(pieces: list[list[int]]) -> None:
    """Swap where the first and the last piece of the first entry's document are said to be."""
    document = pieces[0][2]
    mine = sorted((entry for entry in pieces if entry[2] == document), key=lambda entry: entry[3])
    first, last = mine[0], mine[-1]
    first[:2], last[:2] = last[:2], first[:2]


def stray_temporary(out: Path) -> None:
    (out / "shard-00001.arrow.tmp").write_bytes(b"half a shard")


SUBTLE_DAMAGE = {
    "edited input_tokens": ("split", edit_totals(input_tokens=lambda v: v + 1), "totals.input_tokens"),
    "edited dropped_tokens": ("drop", edit_totals(dropped_tokens=lambda v: v + 7), "+ dropped_tokens"),
    "split_documents zeroed": ("split", edit_totals(split_documents=lambda v: 0), "split_documents 0 do not add up"),
    "split_documents raised": ("split", edit_totals(split_documents=lambda v: v + 10_000), "do not add up"),
    "input_documents raised": (
        "split",
        edit_totals(input_documents=lambda v: v + 1),
        "pieces beyond each split document's first, the totals count",
    ),
    "edited supervised_tokens": ("sft", edit_totals(supervised_tokens=lambda v: v - 1), "totals.supervised_tokens"),
    "max_len below the longest row": ("split", lower_max_len, "row(s) not within 1..100 tokens"),
    "labels column gone": ("sft", drop_labels, "missing column labels"),
    "another dtype": ("sft", widen_input_ids, "column input_ids is list<item: int64>, expected list<item: int32>"),
    "stray temporary file": ("split", stray_temporary, "shard-00001.arrow.tmp: a temporary file"),
    "split piece renumbered": (
        "split",
        edit_split_pieces(lambda pieces: pieces[0].__setitem__(3, pieces[0][3] + 5)),
        "split_pieces: 1 whose pieces are not numbered 0, 1, ... each once, two at least",
    ),
    "split piece in a row the shard lacks": (
        "split",
        edit_split_pieces(lambda pieces: pieces[0].__setitem__(0, 10**6)),
        "split_pieces: 1 name a document (piece) that its shard does not hold (first: shard-00000.arrow row 1000000",
    ),
    "split piece at an index the row lacks": (
        "split",
        edit_split_pieces(lambda pieces: pieces[0].__setitem__(1, 999)),
        "split_pieces: 1 name a document (piece) that its shard does not hold",
    ),
    "split piece listed twice": (
        "split",
        edit_split_pieces(lambda pieces: pieces.append(list(pieces[0]))),
        "split_pieces: 1 name a piece that an earlier entry names",
    ),
    "split piece unlisted": ("split", edit_split_pieces(lambda pieces: pieces.pop(0)), "split_pieces"),
    "split piece malformed": (
        "split",
        damage_sidecar(lambda data: data[: len(data) // 2], fix_checksum=True),
        "split_pieces of 1 shard(s) cannot be read (first: shard-00000.arrow.split_pieces: unreadable",
    ),
    "split_pieces sidecar flipped": (
        "split",
        damage_sidecar(flipped_middle_byte, fix_checksum=False),
        "shard-00000.arrow.split_pieces: sha256 differs from the manifest",
    ),
    "split_pieces sidecar gone": (
        "split",
        lambda out: (out / "shard-00000.arrow.split_pieces").unlink(),
        "shard-00000.arrow.split_pieces: missing (a sidecar of shard-00000.arrow)",
    ),
    "split_pieces sidecar unlisted": (
        "split",
        edit_manifest(lambda m: m["shards"][0]["sidecars"].pop("split_pieces")),
        "shard-00000.arrow.split_pieces: sidecar file not listed in the manifest",
    ),
    "source entry removed": (
        "split",
        edit_sources(lambda entries: entries.pop()),
        "entries, the shard holds ",
    ),
    "source piece beyond its pieces": (
        "split",
        edit_sources(lambda entries: entries[0].update(piece=entries[0]["pieces"])),
        "sources of shard-00000.arrow: 1 entries not piece k of n (k < n) of a record numbered from 1 (first: entry 0",
    ),
    "split piece a whole document in the sources": (
        "split",
        edit_sources(lambda entries: next(e for e in entries if e["pieces"] > 1).update(piece=0, pieces=1)),
        "pieces of split documents, its split_pieces list ",
    ),
    "sources sidecar flipped": (
        "split",
        lambda out: (out / "shard-00000.arrow.sources").write_bytes(
            flipped_middle_byte((out / "shard-00000.arrow.sources").read_bytes())
        ),
        "shard-00000.arrow.sources: sha256 differs from the manifest",
    ),
    "two split pieces' numbers swapped": (
        "split",
        edit_split_pieces(swap_two_piece_numbers),
        "split_pieces: 2 whose tokens are not what pack cut as that piece of that document (its digest differs)",
    ),
    "split pieces out of order": (
        "split",
        edit_split_pieces(swap_first_and_last_piece),
        "document(s) that do not end with the EOS id 50256 (first: row 134 segment 0, piece 10 (the last) of split",
    ),
    "supervised document starts": ("sft", supervise_document_starts, "with a label other than -100 at a document's"),
    "eos_id edited to null": (
        "split",
        edit_manifest(lambda m: m["tokenizer"].update(eos_id=None)),
        "tokenizer.eos_id is null or missing, yet options.eos is true",
    ),
    "eos_id and options.eos edited off": ("split", eos_off, "schema metadata packcli.eos_id is '50256'"),
    "eos_id edited to another id": (
        "split",
        edit_manifest(lambda m: m["tokenizer"].update(eos_id=13)),
        "schema metadata packcli.eos_id is '50256'",
    ),
    "split_pieces deleted": (
        "split",
        edit_manifest(lambda m: [shard.get("sidecars", {}).pop("split_pieces", None) for shard in m["shards"]]),
        "manifest: split_pieces: none listed, yet totals.split_documents is ",
    ),
}


@pytest.mark.parametrize("kind", list(SUBTLE_DAMAGE))
def test_subtle_damage_is_named(small_outputs: dict[str, Path], tmp_path: Path, kind: str) -> None:
    output, damage, expected = SUBTLE_DAMAGE[kind]
    result = verify_damaged(small_outputs[output], tmp_path / "copy", damage)
    assert result.exit_code == 1, result.stdout
    assert expected in result.stderr, result.stderr
    assert "unexpected" not in result.stderr


PIECE_CHANGED = "split_pieces: 1 whose tokens are not what pack cut as that piece of that document (its digest differs)"
EOS_SPLIT_MAX_LEN = 454  # five of tiny_corpus's documents are exactly 454 GPT-2 tokens with their EOS


@pytest.fixture(scope="module")
def bos_split(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path) -> Path:
    """tiny_corpus packed with ``--bos`` and ``--overflow split`` at max_len 256 by tekken (which has a BOS; the
    bundled GPT-2 has none): whole documents and split ones, BOS before each document. Read-only."""
    tekken = shared_path("tokenizers/tekken/tokenizer.json")
    out = tmp_path_factory.mktemp("bos-split") / "packed"
    pack_corpus([str(tiny_corpus)], PackOptions(max_len=256, bos=True, tokenizer=str(tekken)), out)
    return out


@pytest.fixture(scope="module")
def eos_split(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path) -> Path:
    """tiny_corpus packed by the bundled GPT-2 at a max_len that some whole documents fill exactly. Read-only."""
    out = tmp_path_factory.mktemp("eos-split") / "packed"
    pack_corpus([str(tiny_corpus)], PackOptions(max_len=EOS_SPLIT_MAX_LEN), out)
    return out


def segments_of(out: Path, name: str = "shard-00000.arrow") -> dict[tuple[int, int], int]:
    """Each segment (row, index in the row) of a shard: -1 for a whole document, else its piece number."""
    manifest = json.loads((out / "manifest.json").read_text())
    entry = next(shard for shard in manifest["shards"] if shard["file"] == name)
    pieces = {(row, index): piece for row, index, _, piece in listed_split_pieces(out, entry)}
    table = read_shard(out / name)
    return {
        (row, index): pieces.get((row, index), -1)
        for row, cu in enumerate(table.column("cu_seqlens").to_pylist())
        for index in range(len(cu) - 1)
    }


def move_bos_to_a_later_piece(out: Path) -> None:
    """Swap the first token of a whole document (its BOS) with that of a later piece of a split document."""
    segments = segments_of(out)
    whole = next(place for place, piece in segments.items() if piece == -1)
    later = next(place for place, piece in segments.items() if piece > 0)
    table = read_shard(out / "shard-00000.arrow")
    rows = table.to_pylist()
    (a_row, a_index), (b_row, b_index) = whole, later
    a = rows[a_row]["cu_seqlens"][a_index]
    b = rows[b_row]["cu_seqlens"][b_index]
    rows[a_row]["input_ids"][a], rows[b_row]["input_ids"][b] = rows[b_row]["input_ids"][b], rows[a_row]["input_ids"][a]
    rewrite_shard(out, pa.Table.from_pylist(rows, schema=table.schema))


def move_eos_into_a_split_document(out: Path) -> None:
    """A max_len-long whole document loses its EOS and a split document's first piece gains one at its end (where
    its second piece follows): as many pieces end without EOS as before."""
    segments = segments_of(out)
    table = read_shard(out / "shard-00000.arrow")
    rows = table.to_pylist()

    def last_token(row: int, index: int) -> tuple[list[int], int]:
        cu = rows[row]["cu_seqlens"]
        return rows[row]["input_ids"], cu[index + 1] - 1

    full = [
        place
        for place, piece in segments.items()
        if piece == -1 and np.diff(rows[place[0]]["cu_seqlens"])[place[1]] == EOS_SPLIT_MAX_LEN
    ]
    first = next(place for place, piece in segments.items() if piece == 0)
    ids, at = last_token(*full[0])
    eos = ids[at]
    ids[at] = 13
    ids, at = last_token(*first)
    ids[at] = eos
    rewrite_shard(out, pa.Table.from_pylist(rows, schema=table.schema))


def test_a_clean_output_with_bos_and_split_documents_verifies(bos_split: Path) -> None:
    manifest = json.loads((bos_split / "manifest.json").read_text())
    assert manifest["totals"]["split_documents"] > 0 and manifest["options"]["bos"] is True
    assert any(piece > 0 for piece in segments_of(bos_split).values())  # the damage below has a later piece to use
    result = runner.invoke(app, ["verify", str(bos_split)])
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize(
    ("output", "damage", "expected"),
    [
        (
            "bos",
            move_bos_to_a_later_piece,
            [
                "shard-00000.arrow: 1 document(s) that do not start with the BOS id 1 (first: row ",
                ", a whole document, ",
                "shard-00000.arrow: 1 later piece(s) of split documents that start with the BOS id 1, which pack puts "
                "before a document's first token only (first: row ",
                PIECE_CHANGED,
            ],
        ),
        (
            "eos",
            move_eos_into_a_split_document,
            [
                "shard-00000.arrow: 1 document(s) that do not end with the EOS id 50256 (first: row ",
                f", a whole document, {EOS_SPLIT_MAX_LEN} tokens: ends with 13)",
                "shard-00000.arrow: 1 piece(s) before the last of split documents that end with the EOS id 50256, "
                "which pack appends after a document's last token only (first: row ",
                "piece 0 of split document ",
                PIECE_CHANGED,
            ],
        ),
    ],
    ids=["BOS moved to a later piece", "EOS moved into a split document"],
)
def test_specials_are_checked_per_document(
    request: pytest.FixtureRequest, tmp_path: Path, output: str, damage: Callable[[Path], None], expected: list[str]
) -> None:
    """Damage that keeps the counts of documents without BOS or EOS: each document is held to where pack puts them
    (and the split piece whose token changed no longer holds what pack cut there)."""
    result = verify_damaged(request.getfixturevalue(f"{output}_split"), tmp_path / "copy", damage)
    assert result.exit_code == 1, result.stdout
    for line in expected:
        assert line in result.stderr, result.stderr
    assert result.stderr.count("problem: ") == 3, result.stderr  # those three, nothing else


def drop_a_short_documents_eos(out: Path) -> None:
    """The EOS of a whole document shorter than max_len becomes another token."""
    segments = segments_of(out)
    table = read_shard(out / "shard-00000.arrow")
    rows = table.to_pylist()
    row, index = next(place for place, piece in segments.items() if piece == -1)
    rows[row]["input_ids"][rows[row]["cu_seqlens"][index + 1] - 1] = 13
    rewrite_shard(out, pa.Table.from_pylist(rows, schema=table.schema))


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (None, []),
        (move_bos_to_a_later_piece, []),  # without places, a count that stays the same passes: why pack records them
        (
            edit_manifest(lambda m: m["tokenizer"].update(bos_id=13)),
            ["are later pieces of a split document (the output does not record which)"],
        ),
        (
            drop_a_short_documents_eos,
            [
                "1 document(s) that do not end with the EOS id 2 (first: row ",
                ", a document or piece (the output does not record its split pieces), ",
            ],
        ),
    ],
    ids=["intact", "BOS moved", "another bos_id", "an EOS lost"],
)
def test_an_output_without_split_pieces_is_held_to_the_counts(
    bos_split: Path, tmp_path: Path, damage: Callable[[Path], None] | None, expected: list[str]
) -> None:
    """An output packed before split_pieces existed does not place its documents: a document shorter than max_len
    still ends with EOS, and no more documents lack BOS than there are later pieces."""
    out = tmp_path / "unrecorded"
    shutil.copytree(bos_split, out)
    if damage is not None:
        damage(out)
    as_packed_before_split_pieces(out)
    result = runner.invoke(app, ["verify", str(out)])
    assert result.exit_code == (1 if expected else 0), result.stderr
    for line in expected:
        assert line in result.stderr, result.stderr


def test_a_truncated_output_may_end_documents_without_eos_as_often_as_it_truncated(
    tiny_corpus: Path, tmp_path: Path
) -> None:
    """--overflow truncate: a max_len-long document may lack EOS (it was cut), but no more of them than the totals
    count truncated; one shorter than max_len never."""
    out = tmp_path / "truncated"
    pack_corpus([str(tiny_corpus)], PackOptions(max_len=EOS_SPLIT_MAX_LEN, overflow="truncate"), out)  # type: ignore[arg-type]
    assert verify_output(out).ok
    truncated = json.loads((out / "manifest.json").read_text())["totals"]["truncated_documents"]
    table = read_shard(out / "shard-00000.arrow")
    rows = table.to_pylist()
    ended = [
        (row, end - 1)
        for row, values in enumerate(rows)
        for start, end in zip(values["cu_seqlens"], values["cu_seqlens"][1:])
        if values["input_ids"][end - 1] == 50256
    ]
    full = next(
        (row, at)
        for row, at in ended
        if at + 1 - rows[row]["cu_seqlens"][rows[row]["cu_seqlens"].index(at + 1) - 1] == EOS_SPLIT_MAX_LEN
    )
    short = next((row, at) for row, at in ended if (row, at) != full)
    for (row, at), expected in [
        (full, f"totals: {truncated + 1} pieces do not end with EOS, more than the {truncated} that splitting"),
        (short, "1 document(s) that do not end with the EOS id 50256 (first: row "),
    ]:
        damaged = tmp_path / f"damaged-{row}-{at}"
        shutil.copytree(out, damaged)
        changed = [dict(values, input_ids=list(values["input_ids"])) for values in rows]
        changed[row]["input_ids"][at] = 13
        rewrite_shard(damaged, pa.Table.from_pylist(changed, schema=table.schema))
        problems = " | ".join(verify_output(damaged).problems)
        assert expected in problems, problems


def test_pre_tokenized_pieces_may_end_with_the_eos_id_their_records_hold(tmp_path: Path) -> None:
    """Pre-tokenized ids may hold the EOS id anywhere: a piece cut right after one is what pack wrote."""
    corpus = write_jsonl(tmp_path / "ids.jsonl", [{"ids": [5, 6, 7, 9, 8, 8]}, {"ids": [4, 9]}])
    out = tmp_path / "packed"
    pack_corpus([str(corpus)], PackOptions(max_len=4, ids_field="ids", eos_id=9), out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["totals"]["split_documents"] == 1
    assert [5, 6, 7, 9] in [row["input_ids"] for row in read_shard(out / manifest["shards"][0]["file"]).to_pylist()]
    assert verify_output(out).ok


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (edit_manifest(lambda m: m["tokenizer"].update(bos_id=13)), "do not start with the BOS id 13"),
        (
            edit_manifest(lambda m: m["tokenizer"].update(bos_id=None)),
            "tokenizer.bos_id is null or missing, yet options.bos is true",
        ),
    ],
    ids=["another id", "null"],
)
def test_an_edited_bos_id_is_named(
    bos_split: Path, tmp_path: Path, edit: Callable[[Path], None], expected: str
) -> None:
    result = verify_damaged(bos_split, tmp_path / "bos", edit)
    assert result.exit_code == 1, result.stdout
    assert expected in result.stderr, result.stderr


def test_one_bad_row_never_hides_another(small_outputs: dict[str, Path], tmp_path: Path) -> None:
    """Rows damaged in different ways, and two rows damaged alike, in one shard (checksums updated to match)."""
    out = tmp_path / "copy"
    shutil.copytree(small_outputs["split"], out)
    table = read_shard(out / "shard-00000.arrow")
    rows = table.to_pylist()
    rows[0]["position_ids"][5] += 1
    rows[1]["input_ids"][0] = 99_999_999
    rows[2]["cu_seqlens"][-1] -= 1
    rows[4]["cu_seqlens"] = [0]
    rows[6]["position_ids"] = rows[6]["position_ids"][:-1]
    rows[7]["position_ids"][0] = 3
    rewrite_shard(out, pa.Table.from_pylist(rows, schema=table.schema))
    problems = " | ".join(verify_output(out).problems)
    assert "1 row(s) with an id outside the vocabulary [0, 50257) (first: row 1)" in problems
    assert (
        "2 row(s) whose cu_seqlens does not start at 0, rise strictly and end at the row length (first: row 2)"
        in problems
    )
    assert "2 row(s) whose position_ids do not restart exactly at cu_seqlens (first: row 0)" in problems
    assert "1 row(s) with position_ids and input_ids of different lengths (first: row 6)" in problems


def test_stats_on_a_truncated_shard_names_it(small_outputs: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(small_outputs["split"], copy)
    truncate(copy)
    result = runner.invoke(app, ["stats", str(copy)])
    assert result.exit_code == 1
    assert error_line(result.stderr).startswith(f"error: {copy / 'shard-00000.arrow'}: unreadable shard"), result.stderr
    assert error_line(result.stderr) and "unexpected" not in result.stderr


VOCAB, MAX_LEN = 100, 24


@st.composite
def damaged_batches(draw: st.DrawFn) -> tuple[pa.RecordBatch, set[int], set[int]]:
    """Rows of documents (intact ids, positions and cu_seqlens), then some rows given a wrong position_id and some
    an id outside the vocabulary: the batch, and which rows were given each."""
    rows = draw(st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=4), min_size=1, max_size=8))
    ids, positions, cu = [], [], []
    for documents in rows:
        ids.append(draw(st.lists(st.integers(0, VOCAB - 1), min_size=sum(documents), max_size=sum(documents))))
        positions.append([place for length in documents for place in range(length)])
        cu.append([0, *np.cumsum(documents).tolist()])
    moved = draw(st.sets(st.integers(0, len(rows) - 1)))
    for row in moved:
        token = draw(st.integers(0, len(positions[row]) - 1))
        positions[row][token] += draw(st.sampled_from([-3, -1, 1, 2, 7]))
    outside = draw(st.sets(st.integers(0, len(rows) - 1)))
    for row in outside:
        ids[row][draw(st.integers(0, len(ids[row]) - 1))] = draw(st.sampled_from([-1, VOCAB, 2**31 - 1]))
    columns = {"input_ids": ids, "position_ids": positions, "cu_seqlens": cu}
    batch = pa.RecordBatch.from_pydict(
        {name: pa.array(values, pa.list_(pa.int32())) for name, values in columns.items()}
    )
    return batch, moved, outside


@given(damaged_batches())
def test_rows_flagged_are_exactly_the_damaged_ones(case: tuple[pa.RecordBatch, set[int], set[int]]) -> None:
    """The vectorised proof that a batch is intact and the row-by-row search behind it agree: a clean batch flags
    nothing, and each kind of damage flags exactly its rows, counting them and naming the first."""
    batch, moved, outside = case
    manifest = {
        "max_len": MAX_LEN,
        "tokenizer": {"vocab_size": VOCAB, "sha256": "t"},
        "options": {"eos": False},
        "totals": {"split_documents": 0, "truncated_tokens": 0},
        "shards": [{"file": "shard-00000.arrow"}],
    }
    expected = Expected.of(manifest)
    shard = ShardUnderCheck(0, {}, expected, Observed(), SplitPieceCheck(Path("."), manifest, False))
    rows = RowChecks("shard", shard)
    rows.check(batch)
    flagged = {
        "whose position_ids do not restart exactly at cu_seqlens": moved,
        f"with an id outside the vocabulary [0, {VOCAB})": outside,
    }
    assert rows.bad == {what: [len(which), min(which)] for what, which in flagged.items() if which}
    assert rows.tokens == sum(len(row) for row in batch.column("input_ids").to_pylist())


@st.composite
def packed_pieces(draw: st.DrawFn) -> tuple[dict, pa.RecordBatch]:  # type: ignore[type-arg]
    """Documents of content ids (never 0 or 1, as text never yields a special token), given EOS 0 and BOS 0 or 1
    (the same id, or none) and cut at max_len by pack's own code, then laid in rows, a row holding consecutive pieces
    while they fit: the manifest (with split_pieces) and the batch."""
    max_len = draw(st.integers(1, 6))
    eos_id, bos_id = draw(st.sampled_from([None, 0])), draw(st.sampled_from([None, 0, 1]))
    documents = draw(st.lists(st.lists(st.integers(2, VOCAB - 1), min_size=1, max_size=14), min_size=1, max_size=6))
    lengths = np.array([len(document) for document in documents], dtype=np.int64)
    tokens, lengths, _ = add_specials(np.concatenate(documents).astype(np.int32), lengths, None, None, eos_id, bos_id)
    pieces, counts = apply_overflow(lengths, max_len, Overflow.split)
    rows: list[list[list[int]]] = [[]]
    entries = []
    seen: dict[int, int] = {}  # the pieces of each split document laid so far
    pieces_of = np.bincount(pieces.document)
    for start, length, document in zip(pieces.start, pieces.length, pieces.document):
        if sum(map(len, rows[-1])) + length > max_len:
            rows.append([])
        rows[-1].append(tokens[start : start + length].tolist())
        if pieces_of[document] > 1:
            number = seen[document] = seen.get(document, -1) + 1
            entries.append([len(rows) - 1, len(rows[-1]) - 1, int(document), number])
    batch = pa.RecordBatch.from_pydict(
        {
            "input_ids": pa.array([[token for piece in row for token in piece] for row in rows], pa.list_(pa.int32())),
            "position_ids": pa.array(
                [[k for piece in row for k in range(len(piece))] for row in rows], pa.list_(pa.int32())
            ),
            "cu_seqlens": pa.array([np.cumsum([0, *map(len, row)]).tolist() for row in rows], pa.list_(pa.int32())),
        }
    )
    manifest = {
        "max_len": max_len,
        "tokenizer": {"vocab_size": VOCAB, "sha256": "t", "eos_id": eos_id, "bos_id": bos_id},
        "options": {"eos": eos_id is not None, "bos": bos_id is not None},
        "totals": {"split_documents": counts.split_documents, "truncated_tokens": 0},
        "shards": [{"file": "shard-00000.arrow", **({"split_pieces": entries} if entries else {})}],
    }
    return manifest, batch


def specials_checked(manifest: dict, batch: pa.RecordBatch) -> RowChecks:  # type: ignore[type-arg]
    expected = Expected.of(manifest)
    rows = RowChecks(
        "shard",
        ShardUnderCheck(0, manifest["shards"][0], expected, Observed(), SplitPieceCheck(Path("."), manifest, False)),
    )
    rows.check(batch)
    return rows


@given(packed_pieces(), st.data())
def test_bos_and_eos_are_exactly_where_pack_puts_them(case: tuple[dict, pa.RecordBatch], data: st.DataObject) -> None:  # type: ignore[type-arg]
    """What pack writes passes the per-document check (BOS and EOS the same id, max_len 1, a last piece that is EOS
    alone), and turning any document's first token into BOS or out of it, or its last into EOS or out of it, fails."""
    manifest, batch = case
    assert specials_checked(manifest, batch).intact
    eos_id, bos_id = manifest["tokenizer"]["eos_id"], manifest["tokenizer"]["bos_id"]
    ends = [(special, end) for special, end in ((bos_id, "first"), (eos_id, "last")) if special is not None]
    if not ends:
        return
    special, end = data.draw(st.sampled_from(ends))
    rows = batch.to_pylist()
    row = data.draw(st.integers(0, len(rows) - 1))
    cu = rows[row]["cu_seqlens"]
    index = data.draw(st.integers(0, len(cu) - 2))
    at = cu[index] if end == "first" else cu[index + 1] - 1
    ids = rows[row]["input_ids"]
    ids[at] = 2 if ids[at] == special else special
    assert not specials_checked(manifest, pa.RecordBatch.from_pylist(rows, schema=batch.schema)).intact


def test_a_chat_piece_may_end_with_the_eos_its_template_rendered(tmp_path: Path) -> None:
    """A template that ends each assistant turn with EOS (Llama-2 style): a piece cut right after a turn ends with
    EOS though the chat goes on, which is what pack wrote."""
    (tmp_path / "template.jinja").write_text(
        "{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }} [/INST]"
        "{% else %} {{ m.content }}{{ eos_token }}{% endif %}{% endfor %}"
    )
    turns = ["Hi", "Hello there!", "More?", "Sure, here is more."]
    chat = [{"role": ("user", "assistant")[k % 2], "content": text} for k, text in enumerate(turns)]
    corpus = write_jsonl(tmp_path / "chat.jsonl", [{"messages": chat}])

    def pack(max_len: int, out: Path) -> list[list[int]]:
        options = PackOptions(
            max_len=max_len,
            messages_field="messages",
            chat_template=str(tmp_path / "template.jinja"),
            overflow="split",  # type: ignore[arg-type]
        )
        pack_corpus([str(corpus)], options, out)
        return [row["input_ids"] for row in read_shard(out / "shard-00000.arrow").to_pylist()]

    [whole] = pack(256, tmp_path / "whole")
    first_eos = whole.index(50256)
    assert first_eos < len(whole) - 1  # the first assistant turn's EOS, mid-chat
    rows = pack(first_eos + 1, tmp_path / "split")
    assert whole[: first_eos + 1] in rows  # the first piece ends with that EOS
    assert verify_output(tmp_path / "split").ok


def test_a_tokenizer_whose_bos_and_eos_are_ordinary_tokens_verifies(tiny_corpus: Path, tmp_path: Path) -> None:
    """A tokenizer_config.json may name an ordinary token BOS and EOS (here ',' and '.'): text encodes to those ids
    anywhere, so a later piece may start with BOS and an earlier one end with EOS, as pack wrote them."""
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    shutil.copy(shared_path("tokenizers/gpt2/tokenizer.json"), tokenizer)
    (tokenizer / "tokenizer_config.json").write_text(json.dumps({"bos_token": ",", "eos_token": "."}))
    out = tmp_path / "packed"
    pack_corpus([str(tiny_corpus)], PackOptions(max_len=4, bos=True, tokenizer=str(tokenizer)), out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["tokenizer"]["bos_id"], manifest["tokenizer"]["eos_id"]) == (11, 13)
    segments = segments_of(out)
    rows = read_shard(out / "shard-00000.arrow").to_pylist()
    starts = {
        piece
        for (row, index), piece in segments.items()
        if rows[row]["input_ids"][rows[row]["cu_seqlens"][index]] == 11
    }
    assert any(piece > 0 for piece in starts)  # a later piece starting with BOS's id, from the text itself
    report = verify_output(out)
    assert report.ok, report.problems


def test_every_key_of_verify_json_is_documented(packed_sft: Path) -> None:
    """``verify --json`` gives only keys docs/cli.md's verify section names."""
    result = CliRunner().invoke(app, ["verify", str(packed_sft), "--json"])
    assert result.exit_code == 0, result.output
    assert json_keys(json.loads(result.stdout)) - documented_names("cli.md", "## verify") == set()


def test_verify_of_an_output_url_copies_no_shard_to_local_disk(
    s3_server: S3Server, packed: Path, tmp_path: Path
) -> None:
    """``verify`` of an output in the store hashes and checks each shard as it streams it: a process that can write no
    file as large as a shard, its $TMPDIR empty after, checks every shard and row (it copied the output first)."""
    url = put_output(s3_server, packed)
    manifest = json.loads((packed / "manifest.json").read_text())
    smallest = min(shard["bytes"] for shard in manifest["shards"])
    result = run_writing_no_file_over(smallest // 2, tmp_path / "tmp", "verify", url, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["shards"] == len(manifest["shards"])
    assert report["rows"] == manifest["totals"]["sequences"] and report["tokens"] == manifest["totals"]["tokens"]
    assert not list((tmp_path / "tmp").iterdir())


@pytest.fixture(scope="module")
def sft_split(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path) -> Path:
    """Prompt/response records made from ``tiny_corpus`` packed with ``--overflow split`` at max_len 64, in several
    shards: split documents with labels, each shard's sidecar with ``first_supervised``. Read-only."""
    records = [{"prompt": r["text"][:200], "response": r["text"][200:700]} for r in read_jsonl(tiny_corpus)]
    corpus = write_jsonl(tmp_path_factory.mktemp("sft-split") / "sft.jsonl", records)
    out = corpus.parent / "packed"
    fields = {"prompt_field": "prompt", "response_field": "response"}
    pack_corpus([str(corpus)], PackOptions(max_len=64, overflow="split", shard_size=40_000, **fields), out)  # type: ignore[arg-type]
    return out


def edit_first_supervised(
    change: Callable[[int, list[list[int]], list[int]], list[int] | None],
) -> Callable[[Path], None]:
    """A damage: each shard's ``first_supervised`` (its number, its entries, its values) -> new values (None: the
    column removed), the sidecar's size and sha256 fixed in the manifest, as a careful forger would."""

    def apply(out: Path) -> None:
        manifest = json.loads((out / "manifest.json").read_text())
        listing = [shard for shard in manifest["shards"] if "split_pieces" in shard.get("sidecars", {})]
        for number, shard in enumerate(listing):
            table = pa.ipc.open_stream((out / shard["sidecars"]["split_pieces"]["file"]).read_bytes()).read_all()
            entries = listed_split_pieces(out, shard)
            present = "first_supervised" in table.column_names
            values = change(number, entries, table["first_supervised"].to_pylist() if present else [])
            rewrite_split_pieces(out, shard, entries, table["digest"].to_pylist(), values)
        (out / "manifest.json").write_text(json.dumps(manifest))

    return apply


def set_first_piece(number: int, entries: list[list[int]], values: list[int]) -> list[int]:
    """The first shard's first entry naming a document's first piece gets first_supervised 1."""
    k = next(k for k, entry in enumerate(entries) if entry[3] == 0)
    return [1 if number == 0 and at == k else value for at, value in enumerate(values)]


@pytest.mark.parametrize(
    "damage,expected",
    [
        (None, None),
        (edit_first_supervised(lambda number, entries, values: None), None),  # every sidecar as packed before it
        (
            edit_first_supervised(lambda number, entries, values: [2 * v for v in values] if number == 0 else values),
            "split_pieces sidecar holds a first_supervised other than 0 or 1",
        ),
        (
            edit_first_supervised(set_first_piece),
            "split_pieces: 1 with first_supervised 1 at a document's first piece, whose first token is never "
            "supervised (first: shard-",
        ),
        (
            edit_first_supervised(lambda number, entries, values: None if number == 1 else values),
            "split_pieces: first_supervised missing from the sidecars of 1 of ",
        ),
    ],
    ids=["intact", "packed before first_supervised", "a 2", "a first piece supervised", "one sidecar without it"],
)
def test_first_supervised_is_checked_in_a_labelled_output(
    sft_split: Path, tmp_path: Path, damage: Callable[[Path], None] | None, expected: str | None
) -> None:
    """Each split piece's ``first_supervised`` (the whole document's supervision at the piece's first token, which
    export gives back at the join): 0 or 1, 0 for a document's first piece, in every sidecar of a labelled output or
    in none (an output packed before it, which export joins by the neighbour rule)."""
    result = verify_damaged(sft_split, tmp_path / "copy", damage)
    if expected is None:
        assert result.exit_code == 0, result.stderr
    else:
        assert result.exit_code == 1 and expected in result.stderr, result.stderr
        # nothing else (an unreadable sidecar is said by the source index's check too)
        assert result.stderr.count("problem: ") == result.stderr.count(expected), result.stderr


def test_first_supervised_in_an_output_without_labels_is_refused(packed: Path, tmp_path: Path) -> None:
    """A plain text output has no supervision to record: a ``first_supervised`` column in its sidecars is not
    pack's (which writes none there)."""
    sidecars = [shard["sidecars"]["split_pieces"] for shard in json.loads((packed / "manifest.json").read_text())["shards"] if "sidecars" in shard]  # fmt: skip
    assert sidecars and all(
        pa.ipc.open_stream((packed / sidecar["file"]).read_bytes()).schema.names
        == ["row", "index", "document", "piece", "digest"]
        for sidecar in sidecars
    )
    damage = edit_first_supervised(lambda number, entries, values: [0] * len(entries))
    result = verify_damaged(packed, tmp_path / "copy", damage)
    assert result.exit_code == 1, result.stderr
    assert "split_pieces: first_supervised in the sidecars of " in result.stderr
    assert "shard(s) of an output without labels (first: shard-" in result.stderr


@pytest.fixture(scope="module")
def packed_without_positions(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path) -> Path:
    """``tiny_corpus`` packed with ``--no-position-ids`` (read-only)."""
    out = tmp_path_factory.mktemp("lean") / "packed"
    args = ["pack", str(tiny_corpus), "--max-len", "256", "--no-position-ids", "--out", str(out), "--quiet"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


def test_an_output_without_position_ids_verifies_and_damaged_cu_seqlens_are_still_named(
    packed_without_positions: Path, tmp_path: Path
) -> None:
    """No position_ids stored: verify checks what is stored (no position check), so an intact output is OK, and a
    boundary moved or a row's cu_seqlens cut short (size and sha256 fixed by a forger) is still named."""
    intact = verify_damaged(packed_without_positions, tmp_path / "intact", None)
    assert intact.exit_code == 0 and "OK" in intact.stdout, intact.output

    def damage_boundaries(out: Path) -> None:
        table = read_shard(out / "shard-00000.arrow")
        rows = table.to_pylist()
        rows[1]["cu_seqlens"][-1] -= 1
        moved = next(row for row in rows[2:] if len(row["cu_seqlens"]) > 2)
        moved["cu_seqlens"][1] -= 1
        rewrite_shard(out, pa.Table.from_pylist(rows, schema=table.schema))

    damaged = verify_damaged(packed_without_positions, tmp_path / "damaged", damage_boundaries)
    assert damaged.exit_code == 1, damaged.output
    assert "1 row(s) whose cu_seqlens does not start at 0, rise strictly and end at the row length (first: row 1)" in (
        damaged.stderr
    )
    assert "document(s) that do not end with the EOS id 50256" in damaged.stderr  # the moved boundary
    assert "position_ids" not in damaged.stderr


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda m: m["options"].pop("position_ids"), "manifest: columns leave out position_ids, yet options"),
        (
            lambda m: m.update(columns=["input_ids", "position_ids", "cu_seqlens"]),
            "manifest: columns list position_ids, yet options.position_ids is false",
        ),
    ],
)
def test_columns_that_contradict_the_options_are_named(
    packed_without_positions: Path,
    tmp_path: Path,
    edit: Callable[[dict], None],
    problem: str,  # type: ignore[type-arg]
) -> None:
    result = verify_damaged(packed_without_positions, tmp_path / "copy", edit_manifest(edit))
    assert result.exit_code == 1 and f"problem: {problem}" in result.stderr, result.output


def test_an_output_replaced_while_verify_reads_it_is_said_so_not_reported_as_damage(
    packed: Path, tiny_corpus: Path, tmp_path: Path
) -> None:
    """``pack --overwrite`` swaps whole directories: a verify that read the old manifest and then the new shards must
    not call the output damaged (it may be intact); it says the output was replaced while read, naming it."""
    out = tmp_path / "out"
    shutil.copytree(packed, out)
    other = tmp_path / "other"
    result = runner.invoke(app, ["pack", str(tiny_corpus), "--max-len", "256", "--out", str(other), "--quiet"])
    assert result.exit_code == 0, result.output
    swapped: list[int] = []

    def swap_once(*_: object) -> None:  # what a concurrent pack --overwrite does to the directory, mid-read
        if not swapped:
            aside = tmp_path / "aside"
            out.rename(aside)
            other.rename(out)
            swapped.append(1)

    with pytest.raises(PackcliError, match=r"replaced .*while it was read") as caught:
        verify_output(out, swap_once)
    assert caught.value.path == str(out)
    assert swapped
    assert verify_output(out).ok  # the output now there is intact, and says so when read alone


@pytest.mark.parametrize("command", [["show", "--row", "3"], ["stats"], ["show", "--source", "tiny.jsonl:5"]])
def test_show_and_stats_of_an_output_replaced_after_its_manifest_was_read_say_so(
    packed: Path, tiny_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """A concurrent ``pack --overwrite`` lands between reading the manifest and the shards (the swap is made at
    that moment here): the command names the replaced output in one line, exit 1, not a damaged shard."""
    import packcli.report.show
    import packcli.report.stats

    out = tmp_path / "out"
    shutil.copytree(packed, out)
    other = tmp_path / "other"
    result = runner.invoke(app, ["pack", str(tiny_corpus), "--max-len", "256", "--out", str(other), "--quiet"])
    assert result.exit_code == 0, result.output
    module = packcli.report.stats if command == ["stats"] else packcli.report.show
    real = module.read_manifest

    def read_then_swap(path: Path) -> dict:  # type: ignore[type-arg]
        manifest = real(path)
        if other.exists():
            out.rename(tmp_path / "aside")
            other.rename(out)
        return manifest

    monkeypatch.setattr(module, "read_manifest", read_then_swap)
    result = runner.invoke(app, [command[0], str(out), *command[1:]])
    assert result.exit_code == 1, result.output
    assert error_line(result.stderr) == (
        f"error: {out}: replaced by another run (pack --overwrite?) while it was read, so what was read may mix two "
        "outputs: run the command again"
    )


@pytest.mark.parametrize("file", ["shard-00000.arrow", "shard-00000.arrow.sources"])
def test_a_pipe_in_place_of_a_shard_or_sidecar_is_named_not_opened(packed: Path, tmp_path: Path, file: str) -> None:
    """A pipe where a shard or its sources sidecar belongs hung stats and show (a shard) or verify, show and export
    (a sidecar) for good, opening it for a writer that never came, SIGTERM retried; each names it now, at once."""
    import os

    out = tmp_path / "out"
    shutil.copytree(packed, out)
    (out / file).unlink()
    os.mkfifo(out / file)
    sidecar = file.endswith(".sources")
    if sidecar:  # stats does not read a shard's sources: it reports as before
        assert runner.invoke(app, ["stats", str(out)]).exit_code == 0
    for args in (
        *([] if sidecar else [["stats", str(out)]]),
        ["show", str(out), "--row", "0"],
        ["verify", str(out)],
        ["export", str(out), "--to", "megatron", "--out", str(tmp_path / "e"), "--sources"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, (args, result.output)
        assert result.stderr.splitlines()[-1].startswith("error: "), (
            args,
            result.stderr,
        )  # verify lists problems first
        named = [line for line in result.output.splitlines() if f"{file}:" in line]
        assert named and ("not a regular file" in named[0] or "missing" in named[0]), (args, result.output)
