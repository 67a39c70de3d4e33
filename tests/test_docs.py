"""The docs name what exists: every relative link and anchor, every file of the repository they name (modules, tests,
benchmarks), every test (by ``file::name`` or by its name alone), every ``packcli.module.name``, in docs/cli.md's
synopsis every option of every command and no option a command lacks, every ``--flag`` of any doc (a packcli
command's, or another tool's named in ``OTHER_TOOLS_FLAGS``), in every ``packcli COMMAND ...`` a doc shows only that
command's flags, and every key the ``--json`` objects of ``pack``, ``pack --dry-run`` and ``stats`` on a raw corpus
give. A module moved, a test renamed, a flag added or renamed, or a key added fails here, not in a reader's hands.
Reads files and the CLI's own option table; the ``--json`` keys come from the session's tiny corpus and output.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.main
from conftest import REPO, documented_names, json_keys
from typer.testing import CliRunner

from packcli.cli import app
from packcli.format.manifest import TOTALS

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
GLOBAL_FLAGS = {"--debug", "--version", "--help"}
OTHER_TOOLS_FLAGS = {  # flags the docs give to other tools' commands, never to packcli's
    "--format",  # git log
    "--data-path", "--split", "--tokenizer-type",  # Megatron-LM's pretrain_gpt.py
    "--nproc_per_node",  # torchrun
    "--head", "--address",  # ray start, ray job submit
    "--threads", "--idle", "--native",  # py-spy record
    "--rows", "--times",  # bench/bench_balance.py
    "--backend",  # bench/floor.py
}  # fmt: skip
FLAG = r"(?<![\w-])--[a-z][a-z0-9_-]*"
COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]
COMMAND_FLAGS = {
    name: {flag for param in command.params for flag in param.opts if flag.startswith("--")} | GLOBAL_FLAGS
    for name, command in COMMANDS.items()
}
TEST_NAMES = {
    name
    for path in (REPO / "tests").glob("*.py")
    for name in re.findall(r"^def (test_\w+)", path.read_text("utf-8"), re.M)
}
# the shards' schema metadata keys read like module names: ``packcli.eos_id``
METADATA_KEYS = {  # the schema metadata keys of shards and sidecars, which docs name as `packcli.KEY`
    key
    for module in ("schema.py", "sidecars.py")
    for key in re.findall(r'"(packcli\.\w+)"', (REPO / "packcli" / "format" / module).read_text("utf-8"))
}


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings."""
    headings = re.findall(r"^#+ (.*)$", markdown, re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def defines(path: Path, name: str) -> bool:
    """Whether the module at ``path`` defines ``name`` at its top level (a function, a class or an assignment)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            return True
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(target, ast.Name) and target.id == name for target in targets):
            return True
    return False


def module_path(dotted: str) -> Path | None:
    for candidate in (REPO / (dotted.replace(".", "/") + ".py"), REPO / dotted.replace(".", "/") / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_link_file_test_and_name_a_doc_gives_exists(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    missing = []
    for link in re.findall(r"\]\(([^)\s]+)\)", text):
        if link.startswith(("http://", "https://")):
            continue
        target, _, anchor = link.partition("#")
        page = (doc.parent / target).resolve() if target else doc
        if not page.exists():
            missing.append(f"link {link}")
        elif anchor and anchor not in anchors(page.read_text(encoding="utf-8")):
            missing.append(f"anchor {link}")
    for path in set(re.findall(r"\b((?:packcli|tests|bench)/[\w/.-]+\.(?:py|md|json))\b", text)):
        if not (REPO / path).exists():
            missing.append(f"file {path}")
    for file, test in set(re.findall(r"\b((?:tests/)?test_\w+\.py)::(test_\w+)", text)):
        path = REPO / ("" if file.startswith("tests/") else "tests") / file
        if not path.exists() or not defines(path, test):
            missing.append(f"test {file}::{test}")
    for test in set(re.findall(r"`(test_\w+)`", text)) - TEST_NAMES:
        missing.append(f"test {test}")
    for dotted in set(re.findall(r"`(packcli(?:\.\w+)+)`", text)) - METADATA_KEYS:
        parts = dotted.split(".")
        found = [(module_path(".".join(parts[:k])), parts[k:]) for k in range(len(parts), 0, -1)]
        path, rest = next(((path, rest) for path, rest in found if path is not None), (None, []))
        if path is None or (rest and not defines(path, rest[0])):
            missing.append(f"name {dotted}")
    assert missing == []


def synopsis() -> dict[str, str]:
    """docs/cli.md's synopsis, per command: its lines (comments included) joined."""
    block = (REPO / "docs" / "cli.md").read_text(encoding="utf-8").split("```", 2)[1]
    commands: dict[str, str] = {}
    command = ""
    for line in block.splitlines():
        if line.startswith("packcli "):
            command = line.split()[1]
        if command and not command.startswith("-"):
            commands[command] = commands.get(command, "") + "\n" + line
    return commands


def test_the_cli_synopsis_lists_every_option_of_every_command_and_none_it_lacks() -> None:
    documented = synopsis()
    assert set(documented) == set(COMMANDS)
    for name, command in COMMANDS.items():
        flags = {flag for param in command.params for flag in param.opts if flag.startswith("--")} - {"--help"}
        lines = documented[name]
        assert {flag for flag in flags if flag not in re.findall(r"--[a-z][a-z-]*", lines)} == set(), name
        # outside the comments, a flag the synopsis gives is one the command takes
        given = set(re.findall(r"--[a-z][a-z-]*", "\n".join(line.split("#")[0] for line in lines.splitlines())))
        assert given - flags - GLOBAL_FLAGS == set(), name


def code_snippets(markdown: str) -> list[str]:
    """Each line of a fenced block and each inline code span: where a doc shows a command."""
    parts = markdown.split("```")
    return [
        snippet
        for index, part in enumerate(parts)
        for snippet in (part.splitlines() if index % 2 else re.findall(r"`([^`]+)`", part))
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_flag_a_doc_gives_is_one_its_command_takes(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    every_flag = set().union(*COMMAND_FLAGS.values())
    assert set(re.findall(FLAG, text)) - every_flag - OTHER_TOOLS_FLAGS == set()
    wrong = []
    for snippet in code_snippets(text):
        # a command runs to the end of its snippet, a pipe, a `;`, a `&&` or a comment
        for call in re.finditer(r"(?:^|&& |\| |-- )\s*packcli ([a-z][\w-]*)([^|;#&]*)", snippet.strip()):
            name, rest = call.groups()
            if name not in COMMANDS:
                wrong.append(f"no command {name}: {snippet}")
            elif given := set(re.findall(FLAG, rest)) - COMMAND_FLAGS[name]:
                wrong.append(f"{name} takes no {sorted(given)}: {snippet}")
    assert wrong == []


def json_object(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    value: dict[str, Any] = json.loads(result.stdout)
    return value


def test_every_key_of_pack_and_raw_stats_json_is_named_in_its_doc(tiny_corpus: Path, packed_text: Path) -> None:
    """``pack --json`` in docs/cli.md's pack section, ``pack --dry-run --json`` (the CI cache key) in docs/ci.md's
    pieces (top-level keys: the options and tokenizer blocks are the manifest's, in docs/format.md), and every key of
    ``stats --json`` on a raw corpus in docs/stats.md's ``--json`` and raw-corpus sections (``stats`` on an output,
    ``show``, ``verify`` and ``export`` are held to theirs beside their other tests). ``packed_text`` is rerun with
    its own arguments: up to date, nothing written."""
    pack = [str(tiny_corpus), "--max-len", "512", "--shard-size", "100KB", "--out", str(packed_text)]
    raw = json_object("stats", str(tiny_corpus), "--max-len", "512")
    raw_documented = documented_names("stats.md", "## `--json`") | documented_names(
        "stats.md", "## A raw corpus: choosing `--max-len`"
    )
    missing = {
        # "and the manifest totals", as docs/format.md names them
        "cli.md": set(json_object("pack", *pack)) - documented_names("cli.md", "## pack") - set(TOTALS),
        "ci.md": set(json_object("pack", *pack, "--dry-run")) - documented_names("ci.md", "## The pieces"),
        "stats.md": json_keys({**raw, "strategies": {}}) - raw_documented,  # keyed by strategy: their own objects
    }
    assert missing == {doc: set() for doc in missing}


# packcli's own hint for a missing extra (``... which is not installed: pip install 'packcli[torch]'``) is printed by
# an installed packcli, and there pip takes the installed packcli and adds the extra's packages: not an index install
INSTALL = re.compile(r"(?<!which is not installed: )\bpipx? install ([^`\n]+)")
PINNED_GIT = re.compile(r"packcli(\[[\w,]+\])? @ git\+https://\S+/packcli(\.git)?@\S+")


def installs_from_the_index(command: str) -> list[str]:
    """The requirements of one ``pip install`` / ``pipx install`` command that name packcli as the package index would
    resolve it (``packcli``, ``'packcli[torch]'``, ``packcli==0.1``): not a path, a wheel or a pinned git reference."""
    try:
        words = shlex.split(command)
    except ValueError:  # an unclosed quote: the command runs on past the line
        words = command.split()
    return [
        word
        for word in words
        if re.match(r"packcli\b", word) and not word.endswith(".whl") and not PINNED_GIT.fullmatch(word)
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_install_of_packcli_a_doc_gives_works_without_the_package_index(doc: Path) -> None:
    """packcli is not on the package index (and a name the docs tell CI to install that anyone could claim is a
    supply-chain risk): a doc installs it from a checkout (``.``), a built wheel, or a git reference pinned to a tag
    or a commit (``"packcli @ git+https://.../packcli@v0.4.1"``)."""
    text = doc.read_text(encoding="utf-8")
    assert [word for command in INSTALL.findall(text) for word in installs_from_the_index(command)] == []


def test_the_readme_is_under_160_lines_and_opens_with_the_two_set_up_commands() -> None:
    """What a newcomer reads in two minutes: ``make demo`` and ``make test`` first, the measurements in
    docs/performance.md."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 160
    assert lines[2] == "```bash" and [line.split("#")[0].strip() for line in lines[3:5]] == ["make demo", "make test"]
