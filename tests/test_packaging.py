"""packcli as a user installs it: the sdist and wheel carry every file read at run time, and the wheel, installed
into a fresh virtualenv with its runtime dependencies only (no dev extra, no torch), packs, reports and verifies.

The editable install of ``make install`` reads the source tree, so it cannot show a missing asset or an
undeclared dependency; only a real wheel in a bare environment can. The build runs without isolation (offline,
with the dev extra's build and setuptools); the install reuses pip's cache.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, SAMPLE, write_jsonl
from typer.testing import CliRunner

import packcli
from packcli.cli import app

VERSION = packcli.__version__
ASSETS = REPO / "packcli" / "assets"
RUN_TIME_FILES = {path.relative_to(REPO).as_posix() for path in ASSETS.rglob("*") if path.is_file()} | {
    "packcli/py.typed"
}
NETWORK_FAILURE = re.compile(
    r"NewConnectionError|Network is unreachable|Temporary failure in name resolution|timed out"
)
TORCH_MESSAGE = "packcli.torch needs torch, which is not installed: pip install 'packcli[torch]'"


def test_version_option() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"packcli {VERSION}\n"


def run(*command: str | Path, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command with the environment of the test (offline flags included), outside the source tree."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel built from it (as ``make dist`` does), from a copy of the source tree."""
    for module in ("build", "setuptools"):
        try:
            __import__(module)
        except ImportError:
            pytest.skip(f"building the wheel needs {module} (in the dev extra: pip install -e '.[dev]')")
    work = tmp_path_factory.mktemp("packaging")
    source = work / "source"
    ignored = shutil.ignore_patterns(".*", "build", "dist", "packed", "*.egg-info", "__pycache__")
    shutil.copytree(REPO, source, ignore=ignored)
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", work / "dist", source, cwd=work)
    return work / "dist"


@pytest.fixture(scope="module")
def venv(dist: Path) -> Path:
    """A fresh virtualenv holding the wheel and its runtime dependencies, nothing else; returns its bin/."""
    root = dist.parent / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", root, cwd=dist.parent)
    python = root / "bin" / "python"
    wheel = dist / f"packcli-{VERSION}-py3-none-any.whl"
    pip = [sys.executable, "-m", "pip", "--python", python]
    result = run(
        *pip, "install", "-q", "--no-compile", "--timeout", "30", "--retries", "2", wheel, cwd=dist.parent, check=False
    )
    if result.returncode != 0 and NETWORK_FAILURE.search(result.stderr):
        pytest.skip(f"cannot reach the package index to install the runtime dependencies: {result.stderr[-300:]}")
    assert result.returncode == 0, result.stderr
    return root / "bin"


@pytest.mark.packaging
def test_sdist_and_wheel_carry_the_run_time_files(dist: Path) -> None:
    with zipfile.ZipFile(dist / f"packcli-{VERSION}-py3-none-any.whl") as wheel:
        in_wheel = set(wheel.namelist())
    with tarfile.open(dist / f"packcli-{VERSION}.tar.gz") as sdist:
        in_sdist = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert "packcli/assets/gpt2/tokenizer.json.gz" in RUN_TIME_FILES
    assert "packcli/assets/gpt2/LICENSE" in RUN_TIME_FILES
    assert "packcli/assets/gpt2/source.json" in RUN_TIME_FILES
    assert in_wheel >= RUN_TIME_FILES
    assert in_sdist >= RUN_TIME_FILES
    assert {"tests/conftest.py", "examples/sample.jsonl.gz", "Makefile"} <= in_sdist  # an sdist that tests itself


@pytest.mark.packaging
def test_installed_wheel_has_only_runtime_dependencies(venv: Path) -> None:
    where = run(venv / "python", "-c", "import packcli; print(packcli.__file__)", cwd=venv).stdout
    assert Path(where.strip()).is_relative_to(venv.parent)  # the wheel, not the source tree
    for module in ("torch", "pytest", "datasets", "ray", "matplotlib"):
        probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is not None)"
        assert run(venv / "python", "-c", probe, cwd=venv, check=False).returncode == 0, f"{module} is installed"


@pytest.mark.packaging
def test_installed_cli_packs_reports_and_verifies(venv: Path, tmp_path: Path) -> None:
    assert run(venv / "packcli", "--version", cwd=tmp_path).stdout == f"packcli {VERSION}\n"
    packed = json.loads(run(venv / "packcli", "pack", SAMPLE, "--max-len", "2048", "--json", cwd=tmp_path).stdout)
    assert packed["status"] == "packed" and packed["tokens"] > 1_000_000
    manifest = json.loads((tmp_path / "packed" / "manifest.json").read_text())
    source = json.loads((REPO / "packcli" / "assets" / "gpt2" / "source.json").read_text())
    assert manifest["tokenizer"]["sha256"] == source["sha256"]  # the bundled tokenizer, read from the wheel
    stats = json.loads(run(venv / "packcli", "stats", "--json", cwd=tmp_path).stdout)
    assert (stats["documents"], stats["tokens"]) == (packed["documents"], packed["tokens"])
    verified = json.loads(run(venv / "packcli", "verify", "--json", cwd=tmp_path).stdout)
    assert verified["ok"] and verified["tokens"] == packed["tokens"]


CHAT = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Run inside the virtualenv: the supervised tokens of the one packed chat, decoded by the bundled tokenizer.
DECODE_SUPERVISED = """
import gzip, sys
from importlib import resources
import pyarrow as pa
from tokenizers import Tokenizer
table = pa.ipc.open_stream(sys.argv[1]).read_all()
labels = [label for label in table.column("labels")[0].as_py() if label != -100]
raw = resources.files("packcli").joinpath("assets/gpt2/tokenizer.json.gz").read_bytes()
print(Tokenizer.from_str(gzip.decompress(raw).decode()).decode(labels, skip_special_tokens=False), end="")
"""


@pytest.mark.packaging
def test_installed_chat_template_pack(venv: Path, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "chat.jsonl", [CHAT])
    (tmp_path / "chat.jinja").write_text(TEMPLATE)
    pack = ["pack", "chat.jsonl", "--messages-field", "messages", "--chat-template", "chat.jinja", "--max-len", "64"]
    packed = json.loads(run(venv / "packcli", *pack, "--out", "chat", "--json", cwd=tmp_path).stdout)
    assert packed["documents"] == 1 and 0 < packed["supervised_tokens"] < packed["tokens"]
    shard = tmp_path / "chat" / "shard-00000.arrow"
    supervised = run(venv / "python", "-c", DECODE_SUPERVISED, shard, cwd=tmp_path).stdout
    assert supervised == "Hello!<|im_end|>\n<|endoftext|>"
    assert json.loads(run(venv / "packcli", "verify", "chat", "--json", cwd=tmp_path).stdout)["ok"]


@pytest.mark.packaging
def test_loader_without_torch_names_the_extra(venv: Path, tmp_path: Path) -> None:
    result = run(venv / "python", "-c", "import packcli.torch", cwd=tmp_path, check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == f"packcli.errors.MissingExtraError: {TORCH_MESSAGE}"
    caught = "try:\n import packcli.torch\nexcept ImportError as exc:\n print(exc)"  # an ImportError to callers
    assert run(venv / "python", "-c", caught, cwd=tmp_path).stdout == TORCH_MESSAGE + "\n"


def make_dry_run(target: str, venv: Path, *flags: str) -> str:
    """The commands ``make TARGET`` would run with its virtualenv at ``venv`` (``make -n``: none of them runs), the
    virtualenv's path written as ``VENV``. ``flags`` change the mode (``-t``: mark the target done, as a run would)."""
    mode = list(flags) or ["-n"]
    done = run("make", *mode, "-C", REPO, target, f"VENV={venv}", cwd=venv.parent)
    return done.stdout.replace(str(venv), "VENV")


def test_make_demo_installs_the_core_and_the_plot_extra_and_no_torch(tmp_path: Path) -> None:
    commands = make_dry_run("demo", tmp_path / "venv")
    assert 'pip install -q -e ".[plot]"' in commands
    assert "torch" not in commands and ".[dev" not in commands
    assert "VENV/bin/packcli pack examples/sample.jsonl.gz" in commands


def test_make_test_after_make_demo_installs_the_dev_set_and_make_demo_after_make_test_installs_no_torch(
    tmp_path: Path,
) -> None:
    """One virtualenv, two install sets: each target's marker says what it installed, so the demo's lighter set never
    passes for the dev set, in either order."""
    after_demo, after_test = tmp_path / "after-demo", tmp_path / "after-test"
    (after_demo / "bin").mkdir(parents=True), (after_test / "bin").mkdir(parents=True)
    make_dry_run("demo", after_demo, "-t")  # the state make demo leaves
    assert 'pip install -q -e ".[dev,torch]"' in make_dry_run("test", after_demo)
    make_dry_run("test", after_test, "-t")
    assert "torch" not in make_dry_run("demo", after_test)


def collected(*args: str) -> str:
    """pytest's collection of the packaging and engine tests with ``args`` (``-q`` among them: one id a line), in a
    fresh process: the ids it keeps and its count line."""
    command = [sys.executable, "-m", "pytest", *args, "-n", "0", "--collect-only", "-p", "no:cacheprovider"]
    return run(*command, "tests/test_packaging.py", "tests/test_engines.py", cwd=REPO).stdout


def test_a_bare_pytest_leaves_out_the_packaging_and_ray_tests_and_make_test_runs_them(tmp_path: Path) -> None:
    bare = collected("-q")
    assert "test_packaging.py::test_version_option" in bare
    assert "test_installed_cli_packs_reports_and_verifies" not in bare
    assert "test_ray_and_local_engines_write_identical_bytes" not in bare
    assert re.search(r"\d+ deselected", bare)
    [line] = [line for line in make_dry_run("test", tmp_path / "venv").splitlines() if " -m pytest " in line]
    make_test = shlex.split(line)
    everything = collected(*make_test[make_test.index("pytest") + 1 :])
    assert "test_installed_cli_packs_reports_and_verifies" in everything
    assert "test_ray_and_local_engines_write_identical_bytes" in everything
    assert "deselected" not in everything
