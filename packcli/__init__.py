"""packcli: tokenize a corpus and pack whole documents into fixed-length sequences.

``packcli.pack(source, max_len=..., out=...)`` packs a ``datasets.Dataset`` (or files) from Python and returns
the packed rows as a ``datasets.Dataset`` (:mod:`packcli.hf`), warning of lost data with
:class:`PackcliDataLossWarning`; it is loaded on first use, so ``import packcli`` stays light.
"""

from typing import Any

from packcli import errors
from packcli.version import __version__

__all__ = ["PackcliDataLossWarning", "__version__", "pack"]

PackcliDataLossWarning = errors.PackcliDataLossWarning


def __getattr__(name: str) -> Any:
    if name == "pack":
        from packcli.hf import pack

        return pack
    raise AttributeError(f"module 'packcli' has no attribute {name!r}")
