"""The shape of the package: no import cycle between packcli's modules (function-level imports included), none
between its top-level packages, no import up the layer order (cli -> run -> stages -> options -> format -> util), and
the loader loads the format alone (no writer, no strategy, no packing stage).

Run alone as the import-cycle check: ``.venv/bin/python -m pytest -q tests/test_structure.py``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "packcli"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported(path: Path) -> Iterator[str]:
    """Every packcli module ``path`` imports, anywhere in it (inside functions and ``TYPE_CHECKING`` too)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [name if name in MODULES else node.module for name in names]
        else:
            continue
        yield from (name for name in names if name in MODULES)


GRAPH = {name: sorted(set(imported(path)) - {name}) for name, path in MODULES.items()}


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, []):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def package_of(module: str) -> str:
    """``packcli.encode.corpus`` -> ``packcli.encode``; a top-level module stands for itself."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_the_scan_sees_function_level_imports() -> None:
    assert "packcli.cli.pack" in GRAPH["packcli.cli"]
    assert any(name.startswith("packcli.run") for name in GRAPH["packcli.cli.pack"])  # imported inside pack()


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert cycles(GRAPH) == []


def test_no_package_imports_one_that_imports_it_back() -> None:
    packages: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        packages.setdefault(package_of(module), set()).update(
            package_of(target) for target in targets if package_of(target) != package_of(module)
        )
    assert cycles({name: sorted(targets) for name, targets in packages.items()}) == []


# The layer order, lowest first: a module imports only from its own layer or those below (function-level imports
# too). Stages are the pipeline's steps and the readers of its output; they may use one another.
LAYERS = [
    {"errors", "version", "util"},
    {"format"},
    {"options", "option_text"},
    {"read", "encode", "packing", "strategies", "write", "report", "export", "loader", "storage", "engines"},
    {"run"},
    {"cli", "hf", "torch", "__main__", "packcli"},
]


def layer_of(module: str) -> int:
    name = package_of(module).removeprefix("packcli.") if module != "packcli" else "packcli"
    return next(index for index, layer in enumerate(LAYERS) if name in layer)


def test_every_package_has_a_layer() -> None:
    for module in GRAPH:
        layer_of(module)  # StopIteration names a package the order leaves out


def test_no_import_goes_up_the_layer_order() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_write_takes_plain_arrays() -> None:
    """The writers take numpy arrays and callables that gather tokens, not the types of the steps before them (the
    token store, overflow's pieces, a strategy's packing): a change there does not reach how shards are written."""
    earlier = ("packcli.encode", "packcli.read", "packcli.packing", "packcli.strategies")
    reached = [f"{module} -> {target}" for module, targets in GRAPH.items() if module.startswith("packcli.write.") for target in targets if package_of(target) in earlier]  # fmt: skip
    assert reached == []


LOADED = """
import json, sys
import packcli.torch
print(json.dumps(sorted(name for name in sys.modules if name.startswith("packcli."))))
"""


def test_the_loader_loads_the_format_alone() -> None:
    result = subprocess.run([sys.executable, "-c", LOADED], capture_output=True, text=True, check=True, cwd=REPO)
    loaded = json.loads(result.stdout)
    assert "packcli.format.manifest" in loaded
    heavy = [name for name in loaded if name.startswith(("packcli.write", "packcli.strategies", "packcli.packing."))]
    assert heavy == []
    assert not any(name.startswith(("packcli.run", "packcli.encode", "packcli.engines")) for name in loaded)


def test_the_readme_code_map_names_every_package_and_module_and_nothing_else() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Code map", 1)[1].split("```", 2)[1]
    named = {line.split()[0].rstrip("/") for line in block.splitlines() if line.startswith("  ") and line[2] != " "}
    tracked = subprocess.run(["git", "ls-files", "packcli"], cwd=REPO, capture_output=True, text=True).stdout.split()
    tree = {Path(name).parts[1].removesuffix(".py") for name in tracked} - {"__init__", "__main__", "py.typed"}
    if not tree:  # not a git checkout (an sdist): what is on disk
        tree = {path.name.removesuffix(".py") for path in PACKAGE.iterdir() if path.name != "__pycache__"}
        tree -= {"__init__", "__main__", "py.typed"}
    named_tree = {name.removesuffix(".py") for name in named}
    assert named_tree - tree == set(), "the code map names what is not in packcli/"
    assert tree - named_tree == set(), "packcli/ holds what the code map does not name"


MAX_MODULE_LINES = 400  # STYLE.md: a module past this wants splitting


def test_no_module_is_over_400_lines() -> None:
    lines = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()}
    long = {name: count for name, count in lines.items() if count > MAX_MODULE_LINES}
    assert long == {}, f"split these modules (over {MAX_MODULE_LINES} lines)"
