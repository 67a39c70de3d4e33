"""Object storage: where a path goes, a URL may go (``s3://``, ``gs://``, ``az://``, any fsspec protocol).

A URL is carried through packcli as a :class:`~packcli.storage.urls.UrlPath`, a ``Path`` whose file operations go to
the store, so the code that takes paths needs only small branches; ``file://`` URLs and plain paths stay plain
``Path`` objects and behave exactly as before. fsspec and the protocol libraries are the ``cloud`` extra.
"""

from packcli.storage.urls import UrlPath, is_url, location

__all__ = ["UrlPath", "is_url", "location"]
