"""docs/ci.md's recipes run as written: the GitHub workflow's ``run:`` steps in order and the GitLab job's
``script:``, each in a fresh clone of a small repository, with the venv's real ``packcli`` on PATH. Stand-ins: the
checkout is a ``git clone``, ``actions/cache`` and ``upload-artifact`` copy a folder, the install step is the venv
itself. A flag renamed in packcli fails here, not in a user's pipeline."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, SAMPLE, error_line, read_jsonl, write_jsonl

DOC = REPO / "docs" / "ci.md"
EXPRESSION = re.compile(r"\$\{\{\s*steps\.([\w-]+)\.outputs\.([\w-]+)\s*\}\}")
SHELL = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"]  # GitHub's `shell: bash`


def recipes() -> list[dict[str, Any]]:
    """The YAML blocks of docs/ci.md, parsed, in order."""
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)]


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository whose data/ holds 600 paragraphs of the sample's real text, committed at a fixed time."""
    if shutil.which("git") is None:
        pytest.skip("needs git (the recipes restore the inputs' commit times)")
    repo = tmp_path_factory.mktemp("origin")
    paragraphs = [part for record in read_jsonl(SAMPLE) for part in record["text"].split("\n\n") if part.strip()]
    (repo / "data").mkdir()
    write_jsonl(repo / "data" / "corpus.jsonl", [{"text": text} for text in paragraphs[:600]])
    when = {"GIT_AUTHOR_DATE": "2024-01-02T03:04:05Z", "GIT_COMMITTER_DATE": "2024-01-02T03:04:05Z"}
    identity = ["-c", "user.name=ci", "-c", "user.email=ci@example.invalid", "-c", "init.defaultBranch=main"]
    git_env = {**os.environ, **when}
    for command in (["init", "-q"], ["add", "data"], ["commit", "-q", "-m", "corpus"]):
        subprocess.run(["git", *identity, *command], cwd=repo, env=git_env, check=True)
    return repo


def checkout(origin: Path, workspace: Path) -> None:
    """A fresh clone in the same place each run, as a CI runner makes it: every file with the clone's time."""
    shutil.rmtree(workspace, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(origin), str(workspace)], check=True)


def step_env(variables: dict[str, Any], **more: str) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # the venv's packcli and python
    return {**os.environ, "PATH": path, **{key: str(value) for key, value in variables.items()}, **more}


class StepFailed(Exception):
    """A step that exited non-zero: the job stops there (GitHub skips the later steps and saves no cache)."""

    def __init__(self, script: str, done: subprocess.CompletedProcess[str]) -> None:
        super().__init__(f"{script}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}")
        self.script, self.returncode, self.stderr = script, done.returncode, done.stderr


def run_shell(script: str, workspace: Path, env: dict[str, str]) -> str:
    done = subprocess.run([*SHELL, script], cwd=workspace, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise StepFailed(script, done)
    return done.stdout


def is_install(script: str) -> bool:
    return script.startswith("python -m pip install") and "packcli" in script


def run_github(job: dict[str, Any], origin: Path, root: Path) -> dict[str, str]:
    """Run the job's steps; returns each named step's stdout. ``root`` keeps the cache store across runs."""
    workspace, summary = root / "workspace", root / "step-summary.md"
    outputs: dict[str, dict[str, str]] = {}
    logs: dict[str, str] = {}
    saves: list[tuple[Path, Path]] = []
    for step in job["steps"]:
        action, settings = step.get("uses", ""), step.get("with", {})
        resolved = {key: EXPRESSION.sub(lambda m: outputs[m[1]][m[2]], str(value)) for key, value in settings.items()}
        if action.startswith("actions/checkout@"):
            checkout(origin, workspace)
        elif action.startswith("actions/setup-python@"):
            continue
        elif action.startswith("actions/cache@"):
            stored, target = root / "cache" / resolved["key"], workspace / resolved["path"]
            if stored.exists():
                shutil.copytree(stored, target)
            else:
                saves.append((target, stored))  # saved when the job ends
        elif action.startswith("actions/upload-artifact@"):
            source, artifact = workspace / resolved["path"], root / "artifacts" / resolved["name"]
            artifact.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, artifact)
        elif action:
            pytest.fail(f"docs/ci.md uses {action}, which this test has no stand-in for")
        elif is_install(step["run"]):
            continue  # the venv running this test is the install
        else:
            assert not EXPRESSION.search(step["run"]), "a run step's ${{ }} would need GitHub to expand it"
            output = root / f"output-{len(logs)}"
            output.touch()
            env = step_env(job.get("env", {}), GITHUB_OUTPUT=str(output), GITHUB_STEP_SUMMARY=str(summary))
            logs[step["name"]] = run_shell(step["run"], workspace, env)
            if "id" in step:
                outputs[step["id"]] = dict(line.split("=", 1) for line in output.read_text().splitlines())
    for target, stored in saves:
        shutil.copytree(target, stored)
    return logs


def test_github_workflow_runs_as_written(tmp_path: Path, origin: Path) -> None:
    workflow = next(recipe for recipe in recipes() if "jobs" in recipe)
    [job] = workflow["jobs"].values()
    first = run_github(job, origin, tmp_path)
    assert "packed" in first["Pack"] and "OK" in first["Verify"]
    [key] = os.listdir(tmp_path / "cache")
    manifest = json.loads((tmp_path / "artifacts" / "packed-manifest" / "manifest.json").read_text())
    assert key == f"packcli-{manifest['fingerprint']}"
    summary = (tmp_path / "step-summary.md").read_text()
    for command in ("pack", "verify", "stats"):
        assert f"### packcli {command}" in summary
    assert "| `--min-efficiency` | 95% |" in summary and "**FAIL**" not in summary
    again = run_github(job, origin, tmp_path)  # a new clone, the same commit: the cache hits, pack does nothing
    assert "up to date" in again["Pack"] and os.listdir(tmp_path / "cache") == [key]


def test_gitlab_job_runs_as_written(tmp_path: Path, origin: Path) -> None:
    [job] = [recipe["pack"] for recipe in recipes() if "pack" in recipe]
    workspace = tmp_path / "workspace"
    checkout(origin, workspace)
    env = step_env(job.get("variables", {}))
    logs = [run_shell(line, workspace, env) for line in job["script"] if not is_install(line)]
    assert any(log.startswith("fingerprint ") and "would read" in log for log in logs)
    for path in job["artifacts"]["paths"]:
        assert (workspace / path).is_file()
    summary = (workspace / "packcli-summary.md").read_text()
    assert summary.count("### packcli ") == 3 and "**FAIL**" not in summary
    assert set(job["cache"]["paths"]) == {"packed/"} and (workspace / "packed" / "manifest.json").is_file()


def github_job(pack_args: str) -> dict[str, Any]:
    workflow = next(recipe for recipe in recipes() if "jobs" in recipe)
    [job] = workflow["jobs"].values()
    return {**job, "env": {**job["env"], "PACK_ARGS": pack_args}}


def test_github_workflow_with_a_failing_gate_stops_at_the_gates_with_one_line(tmp_path: Path, origin: Path) -> None:
    """A max_len far above the documents leaves rows nearly empty: the Gates step fails (exit 3, one line naming the
    gate, its value and threshold), the step summary holds the verdict, and no cache is saved for the next run."""
    with pytest.raises(StepFailed) as failed:
        run_github(github_job("data/ --max-len 1048576 --out packed"), origin, tmp_path)
    assert failed.value.script.startswith("packcli stats packed --min-efficiency") and failed.value.returncode == 3
    assert re.fullmatch(
        r"error: packed: gate failed: --min-efficiency: packing efficiency \d+\.\d\d% is below 95\.00%\n",
        failed.value.stderr,
    ), failed.value.stderr
    assert "**FAIL**" in (tmp_path / "step-summary.md").read_text() and not (tmp_path / "cache").exists()


def test_github_workflow_with_a_missing_input_stops_at_the_cache_key_with_one_line(
    tmp_path: Path, origin: Path
) -> None:
    with pytest.raises(StepFailed) as failed:
        run_github(github_job("data/missing.jsonl --max-len 2048 --out packed"), origin, tmp_path)
    assert failed.value.script.startswith("packcli pack $PACK_ARGS --dry-run --json") and failed.value.returncode == 1
    assert error_line(failed.value.stderr).startswith("error: data/missing.jsonl: ")
    assert not (tmp_path / "workspace" / "packed").exists() and not (tmp_path / "step-summary.md").exists()


@pytest.mark.packaging
def test_both_recipes_install_a_pinned_git_reference_that_builds_a_whole_packcli(tmp_path: Path) -> None:
    """The package index has no packcli (and a name CI installs from it is one anyone could claim): both recipes
    install a git reference pinned to a tag, the same one. Pointed at a clone of this checkout tagged so, that
    reference builds (with this environment's setuptools, offline) a wheel holding the bundled tokenizer and the
    ``packcli`` command."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout of packcli")
    [github] = [recipe["jobs"]["pack"]["steps"] for recipe in recipes() if "jobs" in recipe]
    [gitlab] = [recipe["pack"]["script"] for recipe in recipes() if "pack" in recipe]
    steps = [step["run"] for step in github if is_install(step.get("run", ""))] + [s for s in gitlab if is_install(s)]
    assert len(steps) == 2
    [requirement] = {shlex.split(step, comments=True)[-1] for step in steps}
    pinned = re.fullmatch(r"packcli @ git\+(https://github\.com/YOUR-ORG/packcli)@(v\d+\.\d+\.\d+)", requirement)
    assert pinned, requirement
    origin = tmp_path / "packcli"
    subprocess.run(["git", "clone", "-q", str(REPO), str(origin)], check=True)
    subprocess.run(["git", "-C", str(origin), "tag", "-f", pinned[2]], check=True, capture_output=True)
    local = requirement.replace(pinned[1], origin.as_uri())
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", "wheel", local]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    [wheel] = (tmp_path / "wheel").glob("packcli-*.whl")
    with zipfile.ZipFile(wheel) as files:
        assert "packcli/assets/gpt2/tokenizer.json.gz" in files.namelist()
        [entry_points] = [name for name in files.namelist() if name.endswith(".dist-info/entry_points.txt")]
        assert "packcli = packcli.cli:main" in files.read(entry_points).decode()
