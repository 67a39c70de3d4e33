"""Every import in packcli/ is the standard library, packcli itself, a runtime dependency or, guarded by
``requires_extra``, an extra declared in pyproject.toml; every runtime dependency is used; and ``packcli --help``
imports none of the heavy ones. So the next undeclared import fails here, not on a user's machine.

Import names map to distributions through the installed metadata (``packages_distributions``): ``jinja2`` is
``Jinja2``, ``huggingface_hub`` is ``huggingface-hub``; a name is never guessed from the other.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from conftest import REPO, write_jsonl

from packcli.errors import EXTRA_MODULES

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11's tomllib")

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
DEV_EXTRA = "dev"  # tools for developing packcli: never imported by packcli/
TEST_EXTRAS = {DEV_EXTRA, "formats"}  # formats: the trainers' readers the export tests read with


def normalize(name: str) -> str:
    """A distribution name in its canonical form (PEP 503): ``Jinja2`` -> ``jinja2``, ``huggingface_hub`` ->
    ``huggingface-hub``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: list[str]) -> set[str]:
    """Distribution names of requirement strings, with ``packcli[a,b]`` expanded to those extras' names."""
    names = set()
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", requirement)
        assert match, f"cannot read the requirement {requirement!r} in pyproject.toml"
        name, extras = normalize(match.group(1)), match.group(2)
        if name == PROJECT["name"]:
            names |= set().union(*(extra_names(extra.strip()) for extra in (extras or "").split(",")))
        else:
            names.add(name)
    return names


def extra_names(extra: str) -> set[str]:
    return requirement_names(PROJECT["optional-dependencies"][extra])


RUNTIME = requirement_names(PROJECT["dependencies"])
EXTRAS = {extra: extra_names(extra) for extra in PROJECT["optional-dependencies"] if extra not in TEST_EXTRAS}
DISTRIBUTIONS = {module: {normalize(name) for name in names} for module, names in packages_distributions().items()}


@dataclass(frozen=True)
class Import:
    """One import statement's top-level module, where it is, and the guard around it."""

    where: str
    module: str
    extra: str | None  # the extra named by an enclosing ``with requires_extra(...)``
    type_checking: bool  # under ``if TYPE_CHECKING:``, so never run


def guard_of(node: ast.With) -> str | None:
    for item in node.items:
        call = item.context_expr
        if (
            isinstance(call, ast.Call)
            and getattr(call.func, "id", getattr(call.func, "attr", None)) == "requires_extra"
        ):
            assert call.args and isinstance(call.args[0], ast.Constant), "requires_extra takes the extra's name first"
            return str(call.args[0].value)
    return None


def imports_of(path: Path) -> list[Import]:
    """The absolute imports of one module, with the extra guarding each."""
    found: list[Import] = []
    where = path.relative_to(REPO).as_posix()

    def visit(node: ast.AST, extra: str | None, type_checking: bool) -> None:
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        if names:
            found.extend(Import(f"{where}:{node.lineno}", n.split(".")[0], extra, type_checking) for n in names)
        if isinstance(node, ast.With):
            extra = guard_of(node) or extra
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for child in node.body:
                visit(child, extra, True)
            for child in node.orelse:
                visit(child, extra, type_checking)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, extra, type_checking)

    visit(ast.parse(path.read_text(), str(path)), None, False)
    return found


IMPORTS = [found for path in sorted((REPO / "packcli").rglob("*.py")) for found in imports_of(path)]
THIRD_PARTY = [i for i in IMPORTS if i.module not in sys.stdlib_module_names and i.module != "packcli"]


def providers(module: str) -> set[str]:
    """The installed distributions that provide a top-level module."""
    assert module in DISTRIBUTIONS, f"{module} is imported by packcli/ but not installed here (make install)"
    return DISTRIBUTIONS[module]


def test_the_scan_sees_the_known_imports() -> None:
    modules = {i.module for i in THIRD_PARTY}
    assert {"numpy", "pyarrow", "tokenizers", "typer", "jinja2", "torch"} <= modules
    [torch] = {i.extra for i in THIRD_PARTY if i.module == "torch"}
    assert torch == "torch"


def test_every_import_is_declared() -> None:
    declared = RUNTIME.union(*EXTRAS.values())
    undeclared = [
        f"{i.where}: {i.module} (from {', '.join(sorted(providers(i.module)))})"
        for i in THIRD_PARTY
        if not providers(i.module) & declared
    ]
    assert not undeclared, "imported but not declared in pyproject.toml:\n" + "\n".join(undeclared)


def test_extras_are_imported_only_under_requires_extra() -> None:
    """An extra's module imported bare would fail with ModuleNotFoundError instead of naming the extra."""
    problems = []
    for found in THIRD_PARTY:
        names = providers(found.module)
        needs = sorted(extra for extra, extra_names in EXTRAS.items() if names & extra_names)
        if not needs or names & RUNTIME or found.type_checking:
            continue  # undeclared imports are test_every_import_is_declared's
        if found.extra not in needs:
            problems.append(f"{found.where}: {found.module} needs `with requires_extra({needs[0]!r}, ...)`")
    assert not problems, "\n".join(problems)


def test_every_runtime_dependency_is_imported() -> None:
    """A runtime dependency packcli never imports only makes ``pip install packcli`` heavier."""
    used = set().union(*(providers(i.module) for i in THIRD_PARTY))
    assert RUNTIME - used == set(), "declared in [project] dependencies but never imported by packcli/"


def test_extra_modules_match_pyproject() -> None:
    assert set(EXTRA_MODULES) == set(EXTRAS)
    for extra, module in EXTRA_MODULES.items():
        assert providers(module) & EXTRAS[extra], f"the {extra} extra does not install {module}"


def test_dev_tools_are_not_runtime_dependencies() -> None:
    dev_only = extra_names(DEV_EXTRA) - RUNTIME.union(*EXTRAS.values())
    assert {"pytest", "build"} <= dev_only


HEAVY = sorted(
    module
    for module, names in DISTRIBUTIONS.items()
    if names & (RUNTIME.union(*EXTRAS.values()) - {"typer", "rich"}) and not module.startswith("_")
)
# Run the real entry point, then list the heavy modules it imported.
AFTER_HELP = """
import json, sys
from packcli.cli import main
heavy, sys.argv = set(json.loads(sys.argv[1])), ["packcli", *sys.argv[2:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(heavy & set(sys.modules))))
"""


@pytest.mark.parametrize("command", [["--help"], ["pack", "--help"], ["--version"]])
def test_help_imports_nothing_heavy(command: list[str]) -> None:
    assert {"numpy", "pyarrow", "tokenizers", "jinja2", "torch"} <= set(HEAVY)
    args = [sys.executable, "-c", AFTER_HELP, json.dumps(HEAVY), *command]
    result = subprocess.run(args, capture_output=True, text=True, check=True, cwd=REPO)
    assert json.loads(result.stdout.splitlines()[-1]) == []


def test_a_json_lines_pack_imports_neither_parquet_nor_verify_nor_pydantic(tmp_path: Path) -> None:
    """A plain pack of JSON Lines reads no Parquet and reuses no part: it pays for neither module's import (about
    15 and 20 ms before its first token; packcli.read.tables defers Parquet's, so must the plan). Nor does its
    command line coerce options through pydantic (typer 0.29 does: pyproject.toml keeps typer below it)."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": "a few words"}, {"text": "and a few more"}])
    unused = ["pyarrow.parquet", "packcli.report.verify", "pydantic"]
    command = ["pack", str(corpus), "--out", str(tmp_path / "out"), "--max-len", "64", "--quiet"]
    result = subprocess.run(
        [sys.executable, "-c", AFTER_HELP, json.dumps(unused), *command], capture_output=True, text=True, cwd=REPO
    )
    assert (tmp_path / "out" / "manifest.json").is_file(), result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == []


# Run the real entry point, then say the BLAS thread count numpy was given and whether it was imported only then.
BLAS_AFTER_VERSION = """
import os, sys
from packcli.cli import main
before, sys.argv = "numpy" in sys.modules, ["packcli", "--version"]
try:
    main()
except SystemExit:
    pass
import numpy
print(before, os.environ.get("OPENBLAS_NUM_THREADS"))
"""


@pytest.mark.parametrize(("given", "kept"), [(None, "1"), ("3", "3")])
def test_the_program_runs_numpy_blas_on_one_thread_unless_told(given: str | None, kept: str) -> None:
    """packcli does no linear algebra; OpenBLAS starting a thread per core as numpy is imported took 0.05 s of every
    run's start (2 cores). The user's own setting is kept."""
    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    result = subprocess.run(
        [sys.executable, "-c", BLAS_AFTER_VERSION], capture_output=True, text=True, check=True, cwd=REPO, env=env
    )
    assert result.stdout.split()[-2:] == ["False", kept]
