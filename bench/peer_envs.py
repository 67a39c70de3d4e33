"""Each peer's own virtual environment under the bench's scratch, installed from PyPI on first use.

A peer is installed in steps (torch first and pinned where a peer needs it: a bare torch pulls a multi-GB CUDA
build), and a marker naming the steps is written last, so a finished environment is reused and one whose steps
changed is installed again. A peer that cannot install is skipped with the reason, not failed: the other peers
still run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TORCH = "torch==2.13.0"
MEGATRON_LM = "PACKCLI_BENCH_MEGATRON_LM"

# Each peer's install steps, one pip install each, in order.
STEPS: dict[str, list[list[str]]] = {
    "megatron": [[TORCH], ["numpy", "packaging", "transformers", "gigatoken==0.10.0", "awkward", "triton"]],
    # dolma pins s3fs 2023.6.0, whose aiobotocore holds botocore to 1.29.161: an unpinned boto3 sends pip's resolver
    # backtracking through every boto3 release (minutes); this one matches.
    "dolma": [["dolma==1.2.1", "boto3==1.26.161"]],
    "datatrove": [["datatrove==0.10.1", "tokenizers", "orjson"]],
    "trl": [[TORCH], ["trl==1.16.0", "datasets"]],
}

# Megatron-LM's training package imports typing.override (Python 3.12), and the only CPU torch wheel here is for
# this Python (3.11): its environment takes override from typing_extensions, in a sitecustomize of its own.
SHIMS = {
    "megatron": (
        "import typing\n\nimport typing_extensions\n\n"
        'if not hasattr(typing, "override"):\n    typing.override = typing_extensions.override\n'
    )
}


def peer_python(name: str, scratch: Path) -> Path | str:
    """The peer's interpreter, its environment installed when missing; or why the peer is skipped."""
    venv = scratch / name
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    wanted = repr((STEPS[name], SHIMS.get(name)))
    if marker.exists() and marker.read_text() == wanted:
        return python
    print(f"  installing {name}'s environment in {venv} (once) ...", flush=True)
    try:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        for step in STEPS[name]:
            subprocess.run([str(python), "-m", "pip", "install", "-q", *step], check=True)
        if name in SHIMS:
            where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
            purelib = subprocess.run([str(python), "-c", where], check=True, capture_output=True, text=True).stdout
            (Path(purelib.strip()) / "sitecustomize.py").write_text(SHIMS[name])
    except subprocess.CalledProcessError as error:
        return (
            f"{name} could not be installed from PyPI ({' '.join(map(str, error.cmd[-3:]))}: exit {error.returncode})"
        )
    marker.write_text(wanted)
    return python


def megatron_checkout() -> Path | str:
    """A Megatron-LM checkout holding tools/preprocess_data.py, or why Megatron's scripts are skipped."""
    where = os.environ.get(MEGATRON_LM)
    if not where:
        return (
            "Megatron-LM's tools/ are not on PyPI (the megatron-core 0.16.1 wheel and sdist hold megatron/core only): "
            f"set {MEGATRON_LM} to a Megatron-LM checkout to run them"
        )
    tools = Path(where) / "tools"
    if not (tools / "preprocess_data.py").exists():
        return f"{MEGATRON_LM}={where} has no tools/preprocess_data.py"
    return Path(where)
