"""packcli's version, in a module of its own: every module that records it (the manifest, the run identity) imports
it from here, not from the package, whose ``__init__`` loads :mod:`packcli.hf` on first use of ``packcli.pack``."""

__all__ = ["__version__"]

__version__ = "0.4.1"
