"""Object storage: where a path goes, a URL may go (``s3://``, ``gs://``, ``az://``, any fsspec protocol), carried as a
:class:`~packcli.storage.urls.UrlPath`, a ``Path`` whose file operations go to the store; a ``file://`` URL is a plain
``Path``. fsspec and the protocol libraries are the ``cloud`` extra."""

from packcli.storage.urls import UrlPath, is_url, location

__all__ = ["UrlPath", "is_url", "location"]
