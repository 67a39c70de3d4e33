"""JSON Lines: one semantics whichever parser reads a line (pyarrow's fast one or the line parser), exact records
after a fallback, the BOM, lone surrogates, and every compression, through the reader and the real CLI."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import re
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import error_line, write_jsonl
from hypothesis import given
from hypothesis import strategies as st
from test_pipeline import documents_of
from typer.testing import CliRunner

from packcli.cli import app
from packcli.encode.tokenizer import load_tokenizer
from packcli.errors import BadRecordError
from packcli.read import jsonl
from packcli.read.fields import Field, ReadCounts
from packcli.read.inputs import read_records

runner = CliRunner()
TEXT = [Field("text")]


def read(path: Path, line_parser: bool = False, skip: bool = False) -> tuple[list[str], ReadCounts, list[str]]:
    """The texts of ``path``; ``line_parser`` forces every piece through the line parser (a per-record convert
    does, as chat records do)."""
    counts, warnings = ReadCounts(), []
    convert = (lambda values: values[0]) if line_parser else None
    batches = read_records(path, TEXT, counts, skip, warnings.append, convert)
    return [text for batch in batches for text in batch.columns[0]], counts, warnings


def pack(*args: str) -> Any:
    return runner.invoke(app, ["pack", *args])


def packed_texts(out: Path) -> Counter[str]:
    """The texts of every document of an output (EOS removed), as a multiset."""
    tokenizer = load_tokenizer().tokenizer
    return Counter(tokenizer.decode(ids[:-1]) for ids in documents_of(out))


def line(text: str, **extra: Any) -> bytes:
    return (json.dumps({"text": text, **extra}) + "\n").encode()


def test_cat_of_two_files_is_read_the_same_by_both_parsers(tmp_path: Path) -> None:
    """``cat a.jsonl b.jsonl`` where ``a`` lacks its last newline: its last line and ``b``'s first share a line.
    The file spans several pieces; later lines are read by one parser only (a duplicate key: pyarrow refuses it,
    Python's json takes the last value; ``Inf``: pyarrow takes it, Python's json refuses it)."""
    a = [f"a {i} " + "x" * 200 for i in range(6000)]
    b = [f"b {i} " + "y" * 200 for i in range(6000)]
    data = b"".join(map(line, a)).rstrip(b"\n") + b"".join(map(line, b[:4000]))
    data += b'{"text": "first", "text": "dup kept"}\n' + b"".join(map(line, b[4000:5000]))
    data += b'{"text": "inf refused", "n": Inf}\n' + b"".join(map(line, b[5000:]))
    corpus = tmp_path / "cat.jsonl"
    corpus.write_bytes(data)
    block = jsonl._BLOCK_BYTES  # the joined line sits in the second piece, the others in the third
    assert block < data.index(b'"a 5999') < 2 * block < data.index(b'"dup kept"') < data.index(b"Inf}") < 3 * block
    joined, inf = 6000, 6000 + 3999 + 1 + 1000 + 1  # physical line numbers: b[1:4000], the dup, b[4000:5000]

    for line_parser in (False, True):
        with pytest.raises(BadRecordError) as info:
            read(corpus, line_parser)
        assert (info.value.path, info.value.line) == (str(corpus), joined)
        assert "more than one JSON value on the line" in info.value.message
        texts, counts, warnings = read(corpus, line_parser, skip=True)
        assert texts == [*a[:-1], *b[1:4000], "dup kept", *b[4000:]]
        convert = (lambda values: values[0]) if line_parser else None
        batches = read_records(corpus, TEXT, ReadCounts(), True, print, convert)
        lines = [n for batch in batches for n in batch.records.tolist()]
        assert lines == [n for n in range(1, 12002) if n not in (joined, inf)]  # each record's physical line
        assert counts.bad_records == 2
        assert [re.search(r"cat\.jsonl:(\d+): ", w).group(1) for w in warnings] == [str(joined), str(inf)]  # type: ignore[union-attr]

    result = pack(str(corpus), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1 and f"cat.jsonl:{joined}: more than one JSON value" in result.stderr
    assert not (tmp_path / "out").exists()
    result = pack(str(corpus), "--out", str(tmp_path / "out"), "--skip-bad-records", "--json", "--quiet")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["bad_records"] == 2 and summary["input_documents"] == len(a) + len(b) - 1
    assert packed_texts(tmp_path / "out") == Counter([*a[:-1], *b[1:], "dup kept"])


# Lines that one parser reads and the other does not, or reads otherwise (measured with pyarrow 26).
TRICKY = [
    b'{"text": "a"}{"text": "b"}',
    b'{"text": "a"} {"text": "b"}',
    b'{"text": "a"}\r{"text": "b"}',
    b'{"text":\n"a"}',
    b'{"text": "a", "text": "b"}',
    b'{"text": "a", "n": Inf}',
    b'{"text": "a", "n": -Inf}',
    b'{"text": "a", "n": -NaN}',
    b'{"text": "a", "n": NaN}',
    b'{"text": "a", "n": -Infinity}',
    b'{"text": "a", "n": 1e999}',
    b'{"text": "a", "n": ' + b"[" * 2000 + b"]" * 2000 + b"}",
    b'{"text": "\\ud800"}',
    b'{"text": "\\ud83d\\ude00"}',
    b'\xef\xbb\xbf{"text": "a"}',
    b'  {"text": "a"}  ',
    b'{"text": "a"}\r',
    b"\x0b",
    b'{"text": "a\xffb"}',
    b'{"te\\u0078t": "a"}',
    b'{"text": "a", "author": "Jos\xe9"}',  # invalid UTF-8 in a field packcli does not read
    b'{"text": "a", "author": "caf\xc3"}',  # a sequence cut short
    b'{"text": "a", "n": ' + b"7" * 5000 + b"}",  # beyond Python's 4,300 digits for an int
    b'{"text": ' + b"7" * 5000 + b"}",
    b'{"text": 5}',
    b"[1]",
]


def parsed(piece: bytes, fast: bool) -> tuple[list[list[Any]], list[int]] | str | None:
    """The piece's columns and each record's line (from 1), by the fast parser (None: it declines) or by lines."""
    if fast:
        found = jsonl._parse_fast(piece, TEXT, jsonl._parse_options(TEXT))
        return None if found is None else (found[0], (found[1] + 1).tolist())

    def refuse(exc: BadRecordError) -> None:
        raise exc

    try:
        columns, lines = jsonl._parse_lines(piece, 1, Path("x.jsonl"), TEXT, refuse, None)
        return columns, lines.tolist()
    except BadRecordError as exc:
        return f"bad line {exc.line}"


@pytest.mark.parametrize("tricky", TRICKY)
def test_the_fast_parser_takes_a_piece_only_when_it_agrees(tricky: bytes) -> None:
    for piece in (tricky + b"\n", b'{"text": "before"}\n' + tricky + b'\n{"text": "after"}', tricky):
        fast = parsed(piece, fast=True)
        assert fast is None or fast == parsed(piece, fast=False), piece


FRAGMENTS = [
    '{"text": "a"}', '{"text": "b", "n": 1}', "{", "}", '"text"', ":", ",", '"x"', " ", "\t", "\r", "[", "]",
    "NaN", "Inf", "-Inf", "-NaN", "Infinity", "1", "null", "\\ud800", "\ufeff", '"te\\u0078t"', "\x0b",
    '{"text": null}', "{}",
]  # fmt: skip


@given(st.lists(st.lists(st.sampled_from(FRAGMENTS), max_size=6).map("".join), min_size=1, max_size=8), st.booleans())
def test_the_parsers_agree_on_random_lines(lines: list[str], final_newline: bool) -> None:
    piece = "\n".join(lines).encode() + (b"\n" if final_newline else b"")
    fast = parsed(piece, fast=True)
    assert fast is None or fast == parsed(piece, fast=False)


# What pyarrow reads and Python's json refuses, as a regular expression: the scan must find exactly this.
NON_JSON_NUMBER = re.compile(rb"[:,\[][ \t\r\n]*(?:-?Inf(?!inity)|-NaN)")
NUMBER_FRAGMENTS = [b"Inf", b"inity", b"-", b"NaN", b" ", b"\t", b"\r", b"\n", b":", b",", b"[", b"I", b"n", b"{", b"x"]


@given(st.lists(st.sampled_from(NUMBER_FRAGMENTS), max_size=14).map(b"".join))
def test_the_non_json_number_scan_finds_what_the_expression_finds(piece: bytes) -> None:
    assert jsonl._non_json_number(piece) == (NON_JSON_NUMBER.search(piece) is not None)


@pytest.mark.parametrize(
    "line,fast",
    [
        (b'{"text": "ardent. [Informal] n: Inflammation, -NaN [Inf"}', True),
        (b'{"text": "a \\" [Inf"}', True),  # an escaped quote does not end the string
        (b'{"text": "a\\\\", "n": [Inf]}', False),  # an escaped backslash does: Inf is a number there
        (b'{"text": "a", "n": Inf}', False),
    ],
)
def test_words_like_inf_inside_strings_keep_the_fast_parser(line: bytes, fast: bool) -> None:
    """gcide's ``[Informal]`` sent a third of its pieces to the line parser (2.7 s of a 10 s pack)."""
    piece = b'{"text": "before"}\n' + line + b"\n"
    assert (parsed(piece, fast=True) is not None) == fast
    assert parsed(piece, fast=False) == (parsed(piece, fast=True) if fast else "bad line 2")


def test_a_line_that_is_null_is_a_bad_record_not_a_crash(tmp_path: Path) -> None:
    """pyarrow 26 dies of SIGSEGV on a JSON block that starts with ``null``; a subprocess shows it as a failure."""
    corpus = tmp_path / "null.jsonl"
    corpus.write_bytes(b'null\n{"text": "after"}\n')
    command = [sys.executable, "-m", "packcli", "pack", str(corpus), "--out", str(tmp_path / "out")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "null.jsonl:1: record is null, not an object" in result.stderr, result.stderr
    assert subprocess.run([*command, "--skip-bad-records"], capture_output=True, timeout=300).returncode == 0


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b'{"text": "cut short\n', "invalid JSON (Unterminated string starting at column 10)"),
        (b'{"text" "no colon"}\n', "invalid JSON (Expecting ':' delimiter at column 9)"),
        (b'{"text": tru}\n', "invalid JSON (Expecting value at column 10)"),
    ],
)
def test_invalid_json_reads_as_one_sentence_naming_the_column(tmp_path: Path, line: bytes, said: str) -> None:
    """Python's message for a string cut short ends in "at"; the column is joined to it, never "at at column"."""
    corpus = tmp_path / "bad.jsonl"
    corpus.write_bytes(b'{"text": "fine"}\n' + line)
    result = CliRunner().invoke(app, ["pack", str(corpus), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and f"bad.jsonl:2: {said}\n" in result.stderr, result.stderr


RECORDS = b'{"text": "one"}\n{"text": "two"}\n'


@pytest.mark.parametrize("skip", [False, True])
def test_a_bom_at_the_start_is_not_part_of_line_one(tmp_path: Path, skip: bool) -> None:
    plain = tmp_path / "bom.jsonl"
    plain.write_bytes(b"\xef\xbb\xbf" + RECORDS)
    zipped = tmp_path / "bom.jsonl.gz"
    zipped.write_bytes(gzip.compress(b"\xef\xbb\xbf" + RECORDS))
    array = tmp_path / "bom.json"
    array.write_bytes(b'\xef\xbb\xbf[{"text": "one"}, {"text": "two"}]')
    for path in (plain, zipped, array):
        for line_parser in (False, True):
            texts, counts, _ = read(path, line_parser, skip)
            assert texts == ["one", "two"] and counts.bad_records == 0, (path, line_parser)
    # A BOM later in the file is no BOM but a character outside JSON: a bad record, on both paths.
    plain.write_bytes(RECORDS + b"\xef\xbb\xbf" + RECORDS)
    for line_parser in (False, True):
        assert read(plain, line_parser, skip=True)[1].bad_records == 1


def test_a_bom_through_the_cli_with_skip_bad_records(tmp_path: Path) -> None:
    corpus = tmp_path / "bom.jsonl"
    corpus.write_bytes(b"\xef\xbb\xbf" + RECORDS)
    chat = tmp_path / "chat.jsonl"
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    chat.write_bytes(b"\xef\xbb\xbf" + (json.dumps({"messages": messages}) + "\n").encode() * 2)
    for number, args in enumerate(([str(corpus)], [str(chat), "--messages-field", "messages"])):
        result = pack(*args, "--out", str(tmp_path / f"out{number}"), "--skip-bad-records", "--json", "--quiet")
        assert result.exit_code == 0, result.stderr
        summary = json.loads(result.stdout)
        assert (summary["bad_records"], summary["input_documents"]) == (0, 2), args


def test_a_line_that_is_not_utf8_is_a_bad_record_whatever_the_lines_around_it(tmp_path: Path) -> None:
    """Invalid UTF-8 in a field packcli does not read: pyarrow's parser never looked at those bytes, so the line was
    packed, or refused when a neighbouring line sent its piece to the line parser, or with --partitions."""
    lines = [line(f"hello {i}") for i in range(50)]
    lines[30] = b'{"text": "ok", "author": "Jos\xe9"}\n'
    alone, beside = tmp_path / "alone.jsonl", tmp_path / "beside.jsonl"
    alone.write_bytes(b"".join(lines))
    beside.write_bytes(b"".join([b" " + lines[0], *lines[1:]]))  # a leading space: that piece goes line by line
    for corpus in (alone, beside):
        for extra in ([], ["--partitions", "2"]):
            result = pack(str(corpus), "--out", str(tmp_path / f"o-{corpus.stem}-{len(extra)}"), *extra)
            assert result.exit_code == 1, (corpus, extra, result.output)
            assert error_line(result.stderr).startswith(f"error: {corpus}:31: invalid UTF-8 at byte 30 of the line")
    result = pack(str(alone), "--out", str(tmp_path / "o"), "--skip-bad-records", "--json", "--quiet")
    assert result.exit_code == 0, result.stderr
    assert (json.loads(result.stdout)["bad_records"], json.loads(result.stdout)["input_documents"]) == (1, 49)


def test_an_integer_beyond_pythons_digits_is_read_as_the_fast_parser_reads_it(tmp_path: Path) -> None:
    """Python's json refuses an int of more than 4,300 digits with a bare ValueError (the run ended in 'unexpected
    ValueError', no file, no line); in a field packcli does not read it is no reason to refuse the record."""
    huge = b"7" * 5000
    records = [b'{"text": "hi", "n": ' + huge + b"}\n", b'{"text": "x"}\n']
    alone, beside, array = tmp_path / "alone.jsonl", tmp_path / "beside.jsonl", tmp_path / "array.json"
    alone.write_bytes(b"".join(records))
    beside.write_bytes(b"".join([records[0], b" " + records[1]]))  # the line parser reads this piece
    array.write_bytes(b"[" + b",".join(record.strip() for record in records) + b"]")
    for corpus in (alone, beside, array):
        assert read(corpus)[:2] == (["hi", "x"], ReadCounts())
        result = pack(str(corpus), "--out", str(tmp_path / "o"), "--overwrite", "--json", "--quiet")
        assert result.exit_code == 0, (corpus, result.output)
        assert json.loads(result.stdout)["input_documents"] == 2
    as_text = tmp_path / "as_text.jsonl"
    as_text.write_bytes(b'{"text": ' + huge + b'}\n{"text": "x"}\n')
    result = pack(str(as_text), "--out", str(tmp_path / "o2"))
    assert result.exit_code == 1 and error_line(result.stderr).startswith(f"error: {as_text}:1: field 'text' is")


@pytest.mark.parametrize("name", ["lists.jsonl", "lists.json"])
def test_a_list_on_line_one_of_json_lines_is_a_bad_record_like_any_other_line(tmp_path: Path, name: str) -> None:
    """A file whose first line is a whole JSON list with more lines after it is JSON Lines, not one array: the list
    is a bad record, skipped and counted with --skip-bad-records (the whole file was refused as 'a JSON list')."""
    corpus = tmp_path / name
    corpus.write_bytes(b'[1, 2]\n{"text": "a"}\n[3]\n{"text": "b"}\n')
    result = pack(str(corpus), "--out", str(tmp_path / "o"))
    assert (
        result.exit_code == 1 and error_line(result.stderr) == f"error: {corpus}:1: record is an array, not an object"
    )
    result = pack(str(corpus), "--out", str(tmp_path / "o"), "--skip-bad-records", "--json", "--quiet")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["bad_records"], summary["input_documents"]) == (2, 2)


@pytest.mark.parametrize(
    "text",
    [
        " " * 5000 + json.dumps([{"text": "a"}, {"text": "b"}]),  # past the first 4 KiB of whitespace
        "\n\n" + json.dumps([{"text": "a"}, {"text": "b"}]) + "\n\n",  # one line, blank lines around it
        json.dumps([{"text": "a"}, {"text": "b"}], indent=2),  # over many lines
        "[\n" + json.dumps({"text": "a"}) + ",\n" + json.dumps({"text": "b"}) + "]\n",
    ],
)
def test_a_json_array_is_read_as_one_however_it_is_laid_out(tmp_path: Path, text: str) -> None:
    corpus = tmp_path / "array.json"
    corpus.write_text(text)
    assert read(corpus)[:2] == (["a", "b"], ReadCounts())


def test_a_utf16_file_is_said_to_be_one(tmp_path: Path) -> None:
    corpus = tmp_path / "wide.jsonl"
    corpus.write_bytes('{"text": "a"}\n{"text": "b"}\n'.encode("utf-16"))  # a byte-order mark first, as Windows writes
    result = pack(str(corpus), "--out", str(tmp_path / "o"))
    assert result.exit_code == 1
    assert error_line(result.stderr) == f"error: {corpus}:1: invalid UTF-8 at byte 1 of the line (the file is UTF-16)"


SURROGATE = b'{"text": "fine"}\n{"text": "half a pair \\ud800 here"}\n{"text": "after"}\n'


def test_a_lone_surrogate_is_a_bad_record_naming_file_and_line(tmp_path: Path) -> None:
    corpus = tmp_path / "sur.jsonl"
    corpus.write_bytes(SURROGATE)
    for line_parser in (False, True):
        with pytest.raises(BadRecordError, match=r"sur\.jsonl:2: field 'text' holds a lone surrogate \(\\ud800"):
            read(corpus, line_parser)
        assert read(corpus, line_parser, skip=True)[:2] == (["fine", "after"], ReadCounts(bad_records=1))
    result = pack(str(corpus), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1 and error_line(result.stderr).startswith(
        f"error: {corpus}:2: field 'text' holds a lone"
    )
    assert error_line(result.stderr)
    result = pack(str(corpus), "--out", str(tmp_path / "out"), "--skip-bad-records", "--json", "--quiet")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["bad_records"] == 1


def test_a_lone_surrogate_in_a_chat_or_a_json_array(tmp_path: Path) -> None:
    chat = write_jsonl(
        tmp_path / "chat.jsonl",
        [{"messages": [{"role": "user", "content": "hi \ud800"}, {"role": "assistant", "content": "yes"}]}],
    )
    result = pack(str(chat), "--messages-field", "messages", "--out", str(tmp_path / "o1"))
    assert result.exit_code == 1 and "chat.jsonl:1: message 1 of 'messages' holds a lone surrogate" in result.stderr
    array = tmp_path / "a.json"
    array.write_text('[{"text": "ok"}, {"text": "\\udc00"}]')
    result = pack(str(array), "--out", str(tmp_path / "o2"))
    assert result.exit_code == 1 and "a.json: record 2: field 'text' holds a lone surrogate" in result.stderr


COMPRESSORS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
def test_every_compression_reads_and_a_cut_stream_names_the_line(tmp_path: Path, suffix: str) -> None:
    whole = COMPRESSORS[suffix](b"".join(line(f"document {i}") for i in range(20000)))
    path = tmp_path / f"a.JSONL{suffix.upper()}"
    path.write_bytes(whole)
    for line_parser in (False, True):
        assert read(path, line_parser)[0] == [f"document {i}" for i in range(20000)]
    path.write_bytes(whole[: len(whole) // 2])
    result = pack(str(path), "--out", str(tmp_path / "out"))
    message = f"{path.name}: the compressed data is damaged or cut short "  # after line N, or in the first block:
    assert result.exit_code == 1 and message in result.stderr, result.stderr  # a bzip2 block yields nothing until whole
    assert error_line(result.stderr)


PARTIAL = {
    ".gz": lambda data: zlib.decompressobj(wbits=31).decompress(data),
    ".xz": lambda data: lzma.LZMADecompressor().decompress(data),
}


@pytest.mark.parametrize("documents", [100, 1500])
@pytest.mark.parametrize("suffix", sorted(PARTIAL))
def test_a_cut_stream_names_the_last_whole_line(tmp_path: Path, suffix: str, documents: int) -> None:
    """A cut file names a line it holds whole, near the last, whether it broke within its first block of reading
    (about 1 MB of text: 100 documents) or later (1,500), not a count of compressed bytes nor a line a block back."""
    whole = COMPRESSORS[suffix](b"".join(line(f"document {i} " * 200) for i in range(documents)))
    cut = whole[: len(whole) * 2 // 3]
    intact = PARTIAL[suffix](cut).count(b"\n")  # what a decompressor yields of the cut file, whole lines only
    assert 0 < intact < documents
    path = tmp_path / f"cut.jsonl{suffix}"
    path.write_bytes(cut)
    result = pack(str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1 and error_line(result.stderr), result.stderr
    named = re.search(
        rf"cut\.jsonl\{suffix}: the compressed data is damaged or cut short after line ([\d,]+): ", result.stderr
    )
    assert named and int(named[1].replace(",", "")) == intact, result.stderr


WHOLE = {**COMPRESSORS, ".zst": lambda data: pa.compress(data, "zstd", asbytes=True)}


@pytest.mark.parametrize("documents", [100, 1500])
@pytest.mark.parametrize("suffix", sorted(WHOLE))
def test_bytes_after_a_whole_stream_name_its_last_line(tmp_path: Path, suffix: str, documents: int) -> None:
    """A compressed file with bytes after its stream (an append gone wrong) names the line where its data ends:
    every line before is whole, none is left out of the count, none of the bytes after is ignored. zstd's read that
    broke lost the lines it had decompressed (it named line 2,988 of 3,000); Python's bzip2 and xz readers dropped
    what follows a stream when it is no stream (the file read as whole)."""
    path = tmp_path / f"tail.jsonl{suffix}"
    path.write_bytes(WHOLE[suffix](b"".join(line(f"document {i} " * 200) for i in range(documents))) + b"GARBAGE")
    result = pack(str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1 and error_line(result.stderr), result.stderr
    assert f"{path.name}: the compressed data is damaged or cut short after line {documents:,}: " in result.stderr


@pytest.mark.parametrize("suffix", sorted(WHOLE))
def test_an_empty_compressed_file_is_damaged_not_an_empty_input(tmp_path: Path, suffix: str) -> None:
    """A compressed file of no bytes holds no stream, not an empty text (a copy cut to nothing; ``gzip -t`` says
    "unexpected end of file"): beside another input it was packed as nothing, without a word."""
    empty, other = tmp_path / f"empty.jsonl{suffix}", tmp_path / "other.jsonl"
    empty.write_bytes(b"")
    other.write_bytes(line("a document"))
    result = pack(str(empty), str(other), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1, result.output
    assert error_line(result.stderr).startswith(
        f"error: {empty}: the compressed data is damaged or cut short at its start: "
    ), result.stderr
    assert not (tmp_path / "out").exists()
    whole = tmp_path / f"whole.jsonl{suffix}"  # an empty text, compressed, is a stream: no document, no error
    whole.write_bytes(WHOLE[suffix](b""))
    assert pack(str(whole), str(other), "--out", str(tmp_path / "out")).exit_code == 0


@pytest.mark.parametrize(("suffix", "kind"), [(".gz", "gzip"), (".zst", "zstd"), (".bz2", "bzip2"), (".xz", "xz")])
def test_a_plain_file_named_as_compressed_is_said_to_be_no_such_data(tmp_path: Path, suffix: str, kind: str) -> None:
    """A plain JSON Lines file named ``.gz`` was "damaged or cut short in its first 2 bytes: Not a gzipped file":
    nothing was cut, the name is wrong. A file whose first bytes are not its compression's is said to be no such
    data, with what it begins with; one cut inside those bytes is still damaged."""
    plain = tmp_path / f"plain.jsonl{suffix}"
    plain.write_bytes(line("a document") * 3)
    result = pack(str(plain), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1, result.output
    assert error_line(result.stderr) == (
        f"error: {plain}: is not {kind} data, though named {suffix} (it begins with b'{{\"text\":'); rename it for "
        "what it holds, or compress it"
    ), result.stderr
    assert not (tmp_path / "out").exists()
    result = runner.invoke(app, ["stats", str(plain), "--max-len", "64"])
    assert result.exit_code == 1 and f"is not {kind} data" in result.stderr, result.output
    other = ".zst" if suffix == ".gz" else ".gz"  # another compression's data under this name: said which it is
    misnamed = tmp_path / f"misnamed.jsonl{suffix}"
    misnamed.write_bytes(WHOLE[other](line("a document")))
    said = error_line(pack(str(misnamed), "--out", str(tmp_path / "out")).stderr)
    assert said.endswith(f"; it is {'zstd' if other == '.zst' else 'gzip'} data: name it {other}"), said
    cut = tmp_path / f"cut.jsonl{suffix}"
    cut.write_bytes(WHOLE[suffix](line("a document"))[:1])
    assert "damaged or cut short" in pack(str(cut), "--out", str(tmp_path / "out")).stderr


def streams(suffix: str, *parts: bytes) -> bytes:
    """The texts 'a 0'.. 'a 99' in one stream, 'b 0'.. 'b 99' in the next, and so on, each part in its place."""
    letters = iter("abcd")
    made = [part if part != b"stream" else next(letters) for part in parts]
    return b"".join(
        COMPRESSORS[suffix](b"".join(line(f"{part} {i}") for i in range(100))) if isinstance(part, str) else part
        for part in made
    )


@pytest.mark.parametrize(
    ("suffix", "parts"),
    [
        (".bz2", [b"stream", b"stream"]),
        (".xz", [b"stream", b"stream"]),  # what `cat a.xz b.xz` makes, as xz reads it
        (".xz", [b"stream", b"\0" * 4, b"stream", b"\0" * 8]),  # xz's stream padding: nulls, 4 at a time
    ],
)
def test_concatenated_streams_and_xz_padding_read_whole(tmp_path: Path, suffix: str, parts: list[bytes]) -> None:
    path = tmp_path / f"many.jsonl{suffix}"
    path.write_bytes(streams(suffix, *parts))
    texts = [f"{letter} {i}" for letter in "ab" for i in range(100)]
    for line_parser in (False, True):
        assert read(path, line_parser)[0] == texts


@pytest.mark.parametrize(
    ("suffix", "parts"),
    [
        (".xz", [b"stream", b"\0" * 3]),  # padding is 4 nulls at a time: `xzcat` calls this corrupt
        (".xz", [b"stream", b"\0" * 4, b"JUNK", b"stream"]),
        (".bz2", [b"stream", b"\0" * 4]),  # bzip2 has no padding: `bzcat` warns of trailing garbage
        (".bz2", [b"stream", b"JUNK", b"stream"]),
    ],
)
def test_bytes_between_or_after_streams_that_are_no_stream_name_the_line(
    tmp_path: Path, suffix: str, parts: list[bytes]
) -> None:
    path = tmp_path / f"junk.jsonl{suffix}"
    path.write_bytes(streams(suffix, *parts))
    result = pack(str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1 and error_line(result.stderr), result.stderr
    assert f"{path.name}: the compressed data is damaged or cut short after line 100: " in result.stderr


@pytest.mark.parametrize("partitioned", [False, True])
def test_a_run_failing_on_a_cut_stream_leaves_nothing_in_scratch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, partitioned: bool
) -> None:
    """A run that fails on bad data removes its node-local scratch, as it removes its staging: nothing is left
    in ``$PACKCLI_SCRATCH`` for a run that will never come."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("PACKCLI_SCRATCH", str(scratch))
    monkeypatch.setenv("PACKCLI_CACHE", str(tmp_path / "cache"))
    whole = gzip.compress(b"".join(line(f"document {i} " * 200) for i in range(100)))
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(whole[: len(whole) * 2 // 3])
    inputs = [str(path), str(write_jsonl(tmp_path / "good.jsonl", [{"text": "whole"}]))] if partitioned else [str(path)]
    extra = ["--partitions", "2", "--workers", "1"] if partitioned else []
    result = pack(*inputs, "--out", str(tmp_path / "out"), "--quiet", *extra)
    assert result.exit_code == 1 and "cut.jsonl.gz: the compressed data is damaged" in result.stderr, result.stderr
    assert sorted(entry.name for entry in scratch.iterdir()) == []


@pytest.mark.parametrize("suffix", [".xz", ".bz2"])
def test_a_few_bytes_appended_after_the_last_stream_are_said_to_be_no_stream(tmp_path: Path, suffix: str) -> None:
    """``echo junk >> corpus.jsonl.xz``: fewer bytes than a stream's header are junk after a whole stream, as with
    more, not a stream 'ended before the end-of-stream marker' (the file is not cut short)."""
    path = tmp_path / f"junk.jsonl{suffix}"
    path.write_bytes(streams(suffix, b"stream", b"junk\n"))
    result = pack(str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1, result.stderr
    assert "after line 100: bytes after a whole stream are no stream" in error_line(result.stderr)
