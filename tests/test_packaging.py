"""packcli as a user installs it and as it is released. The release workflow's build job
(.github/workflows/release.yml) runs here as written: the sdist, the wheel built from it, and the wheel installed
into a fresh virtualenv with its runtime dependencies only (no dev extra, no torch), where it packs, reports and
verifies; the tests below read that build and that virtualenv. The Makefile's two install sets and the tests a bare
pytest selects are checked without installing anything (``make -n``, pytest's collection).

The editable install of ``make install`` reads the source tree, so it cannot show a missing asset or an
undeclared dependency; only a real wheel in a bare environment can. The build and the installs reach the package
index (the tests skip, saying so, where it cannot be reached).
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
import yaml
from conftest import REPO, write_jsonl
from typer.testing import CliRunner

import packcli
from packcli.cli import app

VERSION = packcli.__version__
ASSETS = REPO / "packcli" / "assets"
RUN_TIME_FILES = {path.relative_to(REPO).as_posix() for path in ASSETS.rglob("*") if path.is_file()} | {
    "packcli/py.typed"
}
WORKFLOW = REPO / ".github" / "workflows" / "release.yml"
NOT_CHECKED_OUT = (".venv", ".git", ".*_cache", ".hypothesis", "build", "dist", "packed", "*.egg-info", "__pycache__")
SHELL = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"]  # GitHub's `shell: bash`
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


def test_the_release_publishes_what_the_build_job_checked_on_a_tag_by_trusted_publishing() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert workflow[True]["push"] == {"tags": ["v*"]}  # YAML reads the key ``on`` as true
    build, publish = workflow["jobs"]["build"], workflow["jobs"]["publish"]
    [upload] = [step for step in build["steps"] if step.get("uses", "").startswith("actions/upload-artifact@")]
    [download, publishing] = publish["steps"]
    assert publish["needs"] == "build" and publish["if"] == "github.ref_type == 'tag'"
    assert publish["permissions"] == {"id-token": "write"} and workflow["permissions"] == {"contents": "read"}
    assert download["with"] == upload["with"] and download["uses"].startswith("actions/download-artifact@")
    assert publishing["uses"].startswith("pypa/gh-action-pypi-publish@") and "with" not in publishing  # no token


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release workflow's build job run as written, on a tag of packcli's version: its ``run:`` steps in order,
    in a copy of the source tree (the checkout), with a fresh virtualenv as the runner's Python (setup-python).
    Returns the workspace: ``dist/`` holds the sdist and the wheel, ``smoke/`` the virtualenv holding the wheel."""
    job = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]["build"]
    work = tmp_path_factory.mktemp("release")
    workspace, runner = work / "workspace", work / "runner"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(GITHUB_REF_TYPE="tag", GITHUB_REF_NAME=f"v{VERSION}")
    for step in job["steps"]:
        action = step.get("uses", "")
        if action.startswith("actions/checkout@"):
            shutil.copytree(REPO, workspace, ignore=shutil.ignore_patterns(*NOT_CHECKED_OUT))
        elif action.startswith("actions/setup-python@"):
            run(sys.executable, "-m", "venv", runner, cwd=work)
            env["PATH"] = f"{runner / 'bin'}{os.pathsep}{env['PATH']}"
        elif action.startswith("actions/upload-artifact@"):
            assert (workspace / step["with"]["path"]).is_dir()
        elif action:
            pytest.fail(f"the release workflow uses {action}, which this test has no stand-in for")
        else:
            done = subprocess.run([*SHELL, step["run"]], cwd=workspace, env=env, capture_output=True, text=True)
            if done.returncode != 0 and NETWORK_FAILURE.search(done.stderr):
                pytest.skip(f"cannot reach the package index: {done.stderr[-300:]}")
            assert done.returncode == 0, f"{step['name']}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return workspace


@pytest.mark.packaging
def test_a_tag_that_is_not_packcli_s_version_stops_the_release_before_the_smoke_test(release: Path) -> None:
    steps = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]["build"]["steps"]
    [check] = [step["run"] for step in steps if step.get("name") == "The tag is the version"]
    env = {**os.environ, "GITHUB_REF_TYPE": "tag", "GITHUB_REF_NAME": "v9.9.9"}
    done = subprocess.run([*SHELL, check], cwd=release, env=env, capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.startswith("tag v9.9.9 is not packcli's version (packcli/version.py): built ")


@pytest.fixture(scope="module")
def dist(release: Path) -> Path:
    """The sdist and the wheel built from it, as the release workflow builds them."""
    return release / "dist"


@pytest.fixture(scope="module")
def venv(release: Path) -> Path:
    """The release workflow's fresh virtualenv holding the wheel and its runtime dependencies; returns its bin/."""
    return release / "smoke" / "bin"


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
def test_installed_cli_packs_reports_and_verifies(release: Path, venv: Path, tmp_path: Path) -> None:
    """What the workflow's smoke step packed with the wheel's packcli: the bundled tokenizer read from the wheel, and
    stats and verify agreeing on it."""
    packed = release / "smoke-run" / "packed"
    assert run(venv / "packcli", "--version", cwd=tmp_path).stdout == f"packcli {VERSION}\n"
    manifest = json.loads((packed / "manifest.json").read_text())
    source = json.loads((REPO / "packcli" / "assets" / "gpt2" / "source.json").read_text())
    assert manifest["tokenizer"]["sha256"] == source["sha256"]
    stats = json.loads(run(venv / "packcli", "stats", packed, "--json", cwd=tmp_path).stdout)
    assert stats["tokens"] > 1_000_000
    verified = json.loads(run(venv / "packcli", "verify", packed, "--json", cwd=tmp_path).stdout)
    assert verified["ok"] and verified["tokens"] == stats["tokens"]


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
    assert "test_unreachable_ray_address_is_one_line" not in bare  # it calls a Ray too
    assert re.search(r"\d+ deselected", bare)
    [line] = [line for line in make_dry_run("test", tmp_path / "venv").splitlines() if " -m pytest " in line]
    make_test = shlex.split(line)
    everything = collected(*make_test[make_test.index("pytest") + 1 :])
    assert "test_installed_cli_packs_reports_and_verifies" in everything
    assert "test_ray_and_local_engines_write_identical_bytes" in everything
    assert "deselected" not in everything


def test_under_make_test_s_scheduling_the_ray_and_the_packaging_tests_each_keep_to_one_worker(
    request: pytest.FixtureRequest,
) -> None:
    """``make test`` runs ``-n 2 --dist loadgroup``: xdist sends the tests of one group to one worker, and reads the
    groups tests/conftest.py gives into the node ids (``...@ray``), so the release is built once and two Ray
    clusters never run at once. Checked on the worker's own collection, under make test's options."""
    if not (hasattr(request.config, "workerinput") and request.config.getvalue("loadgroup")):
        pytest.skip("checks the scheduling of make test's -n 2 --dist loadgroup, not of this run")
    grouped = {
        item.nodeid: marker
        for item in request.session.items
        for marker in ("ray", "packaging")
        if item.get_closest_marker(marker) is not None
    }
    if not grouped:
        pytest.skip("no Ray or packaging test is selected in this run")
    assert all(nodeid.endswith(f"@{marker}") for nodeid, marker in grouped.items()), grouped


def test_make_dist_builds_as_the_release_does_without_the_dev_set(tmp_path: Path) -> None:
    commands = make_dry_run("dist", tmp_path / "venv")
    assert "VENV/bin/python -m build --outdir dist ." in commands
    assert "torch" not in commands and ".[dev" not in commands
