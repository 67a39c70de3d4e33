"""A shard mapped so that its pages can be let go once read: the process's resident memory goes back down, and what
is read after a release is the same bytes (the kernel maps them again from its page cache)."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from packcli.format.mapped import ReleasableMap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads RssFile from /proc (Linux)")

SIZE = 48 << 20


def resident_file_pages() -> int:
    """This process's resident file-backed memory in bytes (``RssFile`` of /proc/self/status)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) << 10 for line in status if line.startswith("RssFile:"))


def test_released_pages_leave_the_process_and_read_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "shard"
    path.write_bytes(os.urandom(SIZE))
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    mapped = ReleasableMap(path)
    before = resident_file_pages()
    assert hashlib.sha256(mapped.buffer).hexdigest() == expected  # every page read: resident now
    assert resident_file_pages() - before > SIZE * 3 // 4
    mapped.release()
    assert resident_file_pages() - before < SIZE // 4
    assert hashlib.sha256(mapped.buffer).hexdigest() == expected  # mapped again, the same bytes
    mapped.release_before(mapped.buffer.address + SIZE // 2)
    assert resident_file_pages() - before < SIZE * 3 // 4
    assert hashlib.sha256(mapped.buffer).hexdigest() == expected


def test_an_empty_file_maps_to_an_empty_buffer(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    mapped = ReleasableMap(tmp_path / "empty")
    assert mapped.buffer.size == 0
    mapped.release()
