"""packcli: tokenize a corpus and pack whole documents into fixed-length sequences."""

__all__ = ["__version__"]

__version__ = "0.1.0"
