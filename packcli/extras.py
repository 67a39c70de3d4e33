"""Optional dependencies: which extra installs which module, and the one line a user sees when it is missing.

Every import of an extra's module sits inside ``with requires_extra(...)`` (tests/test_imports.py checks it), so
a missing one reads ``packcli.torch needs torch, which is not installed: pip install 'packcli[torch]'``, never a
bare ``ModuleNotFoundError``. ``EXTRA_MODULES`` mirrors ``[project.optional-dependencies]`` in pyproject.toml.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from packcli.errors import PackcliError

# extra name -> the top-level module it provides (the tests check this against pyproject.toml).
EXTRA_MODULES = {"torch": "torch", "ray": "ray", "plot": "matplotlib"}


class MissingExtraError(PackcliError, ImportError):
    """An optional dependency is not installed: exit code 1, and an ``ImportError`` to Python callers."""


@contextmanager
def requires_extra(extra: str, feature: str) -> Iterator[None]:
    """Turn a missing module of ``extra`` inside the block into one line naming the extra that installs it.

    Example::

        with requires_extra("torch", "packcli.torch"):
            import torch

    Args:
        extra: the extra's name in pyproject.toml, a key of ``EXTRA_MODULES``.
        feature: what needs it, as the user knows it (``packcli.torch``, ``--engine ray``, ``stats --plot``).

    Raises:
        MissingExtraError: the extra's module is not installed. A missing module that is not the extra's (a
            broken install of the extra itself) propagates unchanged, since reinstalling packcli would not fix it.
    """
    module = EXTRA_MODULES[extra]
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise MissingExtraError(
            f"{feature} needs {module}, which is not installed: pip install 'packcli[{extra}]'"
        ) from None
