"""packcli: tokenize a corpus and pack whole documents into fixed-length sequences.

``packcli.pack(source, max_len=..., out=...)`` packs a ``datasets.Dataset`` (or files) from Python and returns
the packed rows as a ``datasets.Dataset`` (:mod:`packcli.hf`); it is loaded on first use, so ``import packcli``
stays light.
"""

from typing import Any

__all__ = ["__version__", "pack"]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "pack":
        from packcli.hf import pack

        return pack
    raise AttributeError(f"module 'packcli' has no attribute {name!r}")
