"""The suite's own isolation: fixtures of every scope run offline and with a tokenization cache of the session's,
never the user's ``~/.cache/packcli`` (module fixtures are set up before a test's function-scoped ones)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def module_environment() -> dict[str, str | None]:
    """What a module fixture sees: its tokenization cache, and what reaching a host off the loopback does."""
    seen: dict[str, str | None] = {"cache": os.environ.get("PACKCLI_CACHE"), "hub": os.environ.get("HF_HUB_OFFLINE")}
    try:
        socket.create_connection(("192.0.2.1", 9), timeout=0.01).close()  # TEST-NET-1: no host answers there
        seen["network"] = "connected"
    except RuntimeError as exc:
        seen["network"] = str(exc)
    except OSError as exc:
        seen["network"] = f"reached the system: {exc}"
    return seen


def test_module_fixtures_run_offline_with_the_sessions_cache(
    module_environment: dict[str, str | None], tmp_path_factory: pytest.TempPathFactory
) -> None:
    cache = module_environment["cache"]
    assert cache is not None and Path(cache).is_relative_to(tmp_path_factory.getbasetemp()), cache
    assert module_environment["hub"] == "1"
    assert "network access attempted in a test" in str(module_environment["network"])


def test_a_test_has_a_cache_of_its_own(tmp_path: Path) -> None:
    assert os.environ["PACKCLI_CACHE"] == str(tmp_path / "packcli-cache")
