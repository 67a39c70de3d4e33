"""The process' memory: give the C heap's free memory back to the operating system after a large, short-lived
allocation, tell how much is resident (what a plan adds its own needs to), and how much the run may use (the
machine's, or a container's limit).

Building a tokenizer from its ``tokenizer.json`` (Hugging Face's or fastokens') allocates two to three times the
finished tokenizer's size and frees it again; glibc's allocator keeps those freed pages resident (in each thread's
arena), so without this they would count in the run's peak memory for the rest of the run. Invariant: it only
returns pages no object uses; where the C library has no ``malloc_trim`` (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["memory_limit", "release_free_memory", "resident_bytes"]

_trim = getattr(ctypes.CDLL(None), "malloc_trim", None) if sys.platform.startswith("linux") else None


def release_free_memory() -> None:
    """Return the free pages of every heap arena to the operating system (glibc ``malloc_trim(0)``)."""
    if _trim is not None:
        _trim(0)


def resident_bytes() -> int:
    """The memory this process holds now (resident set); where ``/proc`` is absent (macOS), its peak so far."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


# Where a control group's memory limit is read: cgroup v2, then v1 ("max", or a huge number, when unlimited).
_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def memory_limit(limits: Sequence[Path] | None = None) -> int:
    """The memory this run may use: the machine's, or the lowest control-group limit among ``limits`` (by default
    the ones this system names) where that is less (a container's, which the out-of-memory killer enforces)."""
    usable = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in _CGROUP_LIMITS if limits is None else limits:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            usable = min(usable, int(text))
    return usable
