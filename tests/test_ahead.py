"""Reading ahead in a thread of its own: items in order and bounded, the reader's error raised in the consumer as it
was (through a real pack: one line naming file and line), and no reading thread left once the run ends however it
ends."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import error_line, sample_lines
from typer.testing import CliRunner

from packcli.cli import app
from packcli.encode.ahead import ReadAhead

READER = "packcli-read"


def reading_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == READER]


def test_items_come_in_order_and_at_most_depth_ahead() -> None:
    made: list[int] = []
    consumed = 0

    def produce() -> Iterator[int]:
        for item in range(200):
            made.append(item)
            yield item

    with ReadAhead(produce, 2, READER) as items:
        for item in items:
            assert item == consumed
            consumed += 1
            # queued (2) and one made but waiting for room: never more, whatever the threads' timing
            assert len(made) <= consumed + 2 + 1
    assert consumed == 200
    assert not reading_threads()


def test_the_producers_error_is_raised_after_its_items_as_it_was() -> None:
    failure = ValueError("line 7 is bad")

    def produce() -> Iterator[int]:
        yield from range(5)
        raise failure

    taken: list[int] = []
    with pytest.raises(ValueError) as raised, ReadAhead(produce, 1, READER) as items:
        taken.extend(items)
    assert raised.value is failure
    assert taken == [0, 1, 2, 3, 4]
    assert not reading_threads()


@pytest.mark.parametrize("ending", [KeyboardInterrupt, RuntimeError])
def test_a_consumer_that_stops_early_ends_the_producer_and_its_cleanup_runs(ending: type[BaseException]) -> None:
    cleaned = threading.Event()

    def produce() -> Iterator[int]:
        try:
            item = 0
            while True:  # never ends by itself
                yield item
                item += 1
        finally:
            cleaned.set()

    with pytest.raises(ending), ReadAhead(produce, 2, READER) as items:
        for item in items:
            if item == 3:
                raise ending("stopped")
    assert cleaned.is_set()
    assert not reading_threads()


def test_a_bad_line_met_by_the_reading_thread_is_one_line_naming_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several read pieces (about 1 MB each) come before the bad line: the reading thread meets it while earlier
    batches are being encoded and stored."""
    monkeypatch.chdir(tmp_path)
    good = sample_lines(400)
    lines = good.count(b"\n")
    corpus = tmp_path / "bad.jsonl"
    corpus.write_bytes(good * 2 + b'{"text": "cut\n' + good)
    assert corpus.stat().st_size > 3 << 20
    result = CliRunner().invoke(app, ["pack", str(corpus), "--out", "out", "--max-len", "512", "--quiet"])
    assert result.exit_code == 1, result.stderr
    assert f"bad.jsonl:{2 * lines + 1}: invalid JSON" in error_line(result.stderr)
    assert not (tmp_path / "out").exists()
    assert not reading_threads()
