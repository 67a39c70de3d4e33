"""The process' memory: give the C heap's free memory back to the operating system after a large, short-lived
allocation.

Building a tokenizer from its ``tokenizer.json`` (Hugging Face's or fastokens') allocates two to three times the
finished tokenizer's size and frees it again; glibc's allocator keeps those freed pages resident (in each thread's
arena), so without this they would count in the run's peak memory for the rest of the run. Invariant: it only
returns pages no object uses; where the C library has no ``malloc_trim`` (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["release_free_memory"]

_trim = getattr(ctypes.CDLL(None), "malloc_trim", None) if sys.platform.startswith("linux") else None


def release_free_memory() -> None:
    """Return the free pages of every heap arena to the operating system (glibc ``malloc_trim(0)``)."""
    if _trim is not None:
        _trim(0)
