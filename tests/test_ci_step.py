"""The CI data-prep step: ``pack --dry-run`` (the cache key), the ``stats`` gates, and the Markdown summary."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE, error_line, read_jsonl, write_jsonl
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from packcli.cli import app
from packcli.errors import UsageError
from packcli.report.gates import parse_gates

runner = CliRunner()


def invoke(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args), env=env)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 paragraphs of the bundled sample's real text as short documents, plain JSON Lines (cuttable into
    partitions)."""
    paragraphs = [part for record in read_jsonl(SAMPLE) for part in record["text"].split("\n\n") if part.strip()]
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", [{"text": p} for p in paragraphs[:600]])


@pytest.fixture(scope="module")
def packed(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("packed") / "out"
    result = invoke("pack", str(corpus), "--max-len", "512", "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.stderr
    return out


def listing(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def dry_then_pack(tmp_path: Path, inputs: list[str], *flags: str) -> dict[str, Any]:
    """The fingerprint ``--dry-run`` prints is the one the run writes; the dry run leaves the directory as it was."""
    out = tmp_path / "out"
    before = listing(tmp_path)
    cache = Path(os.environ["PACKCLI_CACHE"])
    dry = invoke("pack", *inputs, "--out", str(out), *flags, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] is True and plan["status"] == "would-pack" and plan["output"] == "absent"
    assert listing(tmp_path) == before and not (cache.exists() and any(cache.iterdir()))
    real = invoke("pack", *inputs, "--out", str(out), *flags, "--json", "--quiet")
    assert real.exit_code == 0, real.stderr
    assert json.loads(real.stdout)["fingerprint"] == plan["fingerprint"]
    assert json.loads((out / "manifest.json").read_text())["fingerprint"] == plan["fingerprint"]
    again = json.loads(invoke("pack", *inputs, "--out", str(out), *flags, "--dry-run", "--json").stdout)
    assert again["status"] == "up-to-date" and again["output"] == "same"
    assert again["fingerprint"] == plan["fingerprint"]
    return plan


def test_dry_run_fingerprint_is_the_plain_runs(tmp_path: Path, corpus: Path) -> None:
    dry_then_pack(tmp_path, [str(corpus)], "--max-len", "512")


def test_dry_run_fingerprint_is_the_mixed_runs(tmp_path: Path, corpus: Path) -> None:
    other = write_jsonl(tmp_path / "other.jsonl", [{"text": f"line {k} of another source"} for k in range(50)])
    plan = dry_then_pack(tmp_path, [str(corpus), str(other)], "--max-len", "512", "--weights", "7,3")
    assert [source["weight"] for source in plan["sources"]] == [0.7, 0.3]


def test_dry_run_fingerprint_is_the_partitioned_runs(tmp_path: Path, corpus: Path) -> None:
    dry_then_pack(tmp_path, [str(corpus)], "--max-len", "512", "--partitions", "2", "--workers", "2")


def test_dry_run_reports_what_it_would_read(tmp_path: Path, corpus: Path) -> None:
    result = invoke("pack", str(corpus), "--partitions", "3", "--out", str(tmp_path / "o"), "--dry-run", "--json")
    plan = json.loads(result.stdout)
    assert plan["input_files"] == 1 and plan["input_bytes"] == corpus.stat().st_size
    assert plan["input_documents"] is None  # JSON Lines: only reading would tell
    assert plan["partitions"]["count"] == 3 and sum(plan["partitions"]["bytes"]) == corpus.stat().st_size
    assert plan["tokenizer"]["name"] and "records are not read" in plan["checked"]
    human = invoke("pack", str(corpus), "--partitions", "3", "--out", str(tmp_path / "o"), "--dry-run")
    assert human.exit_code == 0 and human.stdout.splitlines()[0] == f"fingerprint {plan['fingerprint']}"
    assert "would read 1 file(s)" in human.stdout and "3 partitions" in human.stdout


def test_dry_run_does_not_read_records(tmp_path: Path, corpus: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(corpus.read_bytes() + b"{not json\n")
    result = invoke("pack", str(bad), "--out", str(tmp_path / "o"), "--dry-run", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["status"] == "would-pack"
    assert invoke("pack", str(bad), "--out", str(tmp_path / "o"), "--quiet").exit_code == 1  # the run finds it


def test_dry_run_still_checks_what_it_can(tmp_path: Path, corpus: Path) -> None:
    missing = invoke("pack", str(tmp_path / "nope.jsonl"), "--dry-run")
    assert missing.exit_code == 1 and "nope.jsonl" in missing.stderr
    tokenizer = invoke("pack", str(corpus), "--tokenizer", str(tmp_path / "no-tokenizer"), "--dry-run")
    assert tokenizer.exit_code != 0 and "no-tokenizer" in tokenizer.stderr
    unreadable = tmp_path / "locked.jsonl"
    unreadable.write_text('{"text": "a"}\n')
    unreadable.chmod(0)
    if os.access(unreadable, os.R_OK):
        pytest.skip("running as root: permissions do not stop reading")
    denied = invoke("pack", str(unreadable), "--dry-run")
    assert denied.exit_code == 1 and "locked.jsonl" in denied.stderr and "cannot be read" in denied.stderr


def test_dry_run_of_stdin_leaves_no_spool(tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    result = runner.invoke(
        app, ["pack", "-", "--out", str(tmp_path / "o"), "--dry-run", "--json"], input=corpus.read_bytes()
    )
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["files"][0]["path"] == "<stdin>" and list(tmp_path.iterdir()) == []


def test_dry_run_refuses_what_the_run_would(tmp_path: Path, corpus: Path, packed: Path) -> None:
    result = invoke("pack", str(corpus), "--max-len", "256", "--out", str(packed), "--dry-run")
    assert result.exit_code == 1 and "--overwrite" in result.stderr
    replacing = invoke("pack", str(corpus), "--max-len", "256", "--out", str(packed), "--dry-run", "--overwrite")
    assert replacing.exit_code == 0 and "replacing the output there" in replacing.stdout


def test_gates_pass_and_fail_with_one_line(packed: Path) -> None:
    figures = json.loads(invoke("stats", str(packed), "--json").stdout)
    efficiency, gap = figures["packing"]["efficiency"], figures["gap_to_lower_bound"]
    passing = invoke("stats", str(packed), "--min-efficiency", f"{efficiency - 0.01:.4f}", "--max-loss", "0",
                     "--max-gap", str(gap), "--json")  # fmt: skip
    assert passing.exit_code == 0, passing.stderr
    assert [gate["passed"] for gate in json.loads(passing.stdout)["gates"]] == [True, True, True]
    failing = invoke("stats", str(packed), "--min-efficiency", "100%", "--json")
    assert failing.exit_code == 3
    assert json.loads(failing.stdout)["gates"][0]["passed"] is False  # the figures still come, one object
    [line] = failing.stderr.strip().splitlines()
    assert "--min-efficiency" in line and f"{efficiency:.2%}" in line and "100.00%" in line
    if gap:
        too_far = invoke("stats", str(packed), "--max-gap", str(gap - 1))
        assert too_far.exit_code == 3 and f"{gap:,} sequences above the lower bound" in too_far.stderr
    assert invoke("stats", str(packed), "--max-gap", "0%").exit_code == (3 if gap else 0)


def test_loss_gate_counts_dropped_and_truncated_tokens(tmp_path: Path, corpus: Path) -> None:
    out = tmp_path / "o"
    assert (
        invoke("pack", str(corpus), "--max-len", "512", "--overflow", "truncate", "--out", str(out), "-q").exit_code
        == 0
    )
    totals = json.loads((out / "manifest.json").read_text())["totals"]
    share = totals["truncated_tokens"] / totals["input_tokens"]
    assert invoke("stats", str(out), "--max-loss", f"{share + 1e-6:.6f}").exit_code == 0
    lost = invoke("stats", str(out), "--max-loss", "1%")
    assert lost.exit_code == 3 and f"{share:.2%} of the input tokens" in lost.stderr


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--min-efficiency", "1.5"), ("--min-efficiency", "101%"), ("--min-efficiency", "-0.1"),
     ("--max-loss", "-1%"), ("--max-loss", "x"), ("--max-gap", "-3"), ("--max-gap", "0.5"), ("--max-gap", "²")],
)  # fmt: skip
def test_impossible_gates_are_usage_errors(packed: Path, flag: str, value: str) -> None:
    result = invoke("stats", str(packed), f"{flag}={value}")
    assert result.exit_code == 2 and flag in result.stderr


def test_gate_on_a_damaged_output_reports_the_damage(tmp_path: Path, packed: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in packed.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["totals"]["tokens"] += 1
    (copy / "manifest.json").write_text(json.dumps(manifest))
    result = invoke("stats", str(copy), "--min-efficiency", "0")
    # the output's own listing check (stats reads none it cannot trust) names the damage before any gate runs
    assert result.exit_code == 1 and "totals.tokens" in result.stderr and "run packcli verify" in result.stderr
    assert invoke("verify", str(copy), "--summary", str(tmp_path / "verify.md")).exit_code == 1
    assert "**FAILED: 2 problems**\n\n- manifest totals.tokens" in (tmp_path / "verify.md").read_text()
    shard = next(copy.glob("shard-*.arrow"))
    shard.write_bytes(shard.read_bytes()[:-8])
    truncated = invoke("stats", str(copy), "--min-efficiency", "0")
    assert truncated.exit_code == 1 and f"{shard.name}: " in truncated.stderr and "bytes" in truncated.stderr


def test_gates_on_a_raw_corpus_judge_the_packing_it_would_get(corpus: Path) -> None:
    result = invoke("stats", str(corpus), "--max-len", "512", "--min-efficiency", "100%", "--json", "-q")
    assert result.exit_code == 3 and json.loads(result.stdout)["gates"][0]["gate"] == "--min-efficiency"


def test_summary_markdown_for_pack_stats_and_verify(tmp_path: Path, corpus: Path) -> None:
    github = tmp_path / "step-summary.md"
    mine = tmp_path / "mine.md"
    env = {"GITHUB_STEP_SUMMARY": str(github)}
    out = str(tmp_path / "o")
    packed = invoke("pack", str(corpus), "--max-len", "64", "--overflow", "drop", "--out", out, "--json", env=env)
    assert packed.exit_code == 0 and json.loads(packed.stdout)["status"] == "packed"  # stdout: the object alone
    assert invoke("verify", out, "--summary", str(mine), env=env).exit_code == 0
    assert invoke("stats", out, "--max-loss", "1%", "--summary", str(github), env=env).exit_code == 3
    text = github.read_text()
    assert text.count("### packcli pack") == 1 and text.count("### packcli stats") == 1  # named twice: once
    assert "packing efficiency" in text and "tokens (" in text and "**1 warning**" in text
    assert "--overflow drop left out" in text and "| `--max-loss` | 1% |" in text and "**FAIL**" in text
    assert "OK: every invariant and checksum holds" in mine.read_text() and "### packcli verify" not in text
    assert not invoke("pack", str(corpus), "--out", out, "--dry-run", "--overwrite", env=env).stderr
    assert github.read_text() == text  # a dry run writes nothing, no summary either


@given(st.integers(0, 10_000), st.integers(1, 10_000))
def test_a_share_reads_the_same_as_a_fraction_or_a_percentage(part: int, whole: int) -> None:
    share = min(part, whole) / whole
    [fraction, loss, gap] = parse_gates(repr(share), f"{share * 100!r}%", f"{share * 100!r}%")
    assert fraction.limit == pytest.approx(share) and loss.limit == pytest.approx(share)
    assert gap.limit == pytest.approx(share) and gap.relative
    [count] = parse_gates(None, None, str(part))
    assert count.limit == part and not count.relative
    assert (
        count.passes(part) and not count.passes(part + 1) and fraction.passes(share) and not loss.passes(share + 0.01)
    )
    with pytest.raises(UsageError):
        parse_gates(repr(1 + part / whole + 1e-9), None, None)
    with pytest.raises(UsageError):
        parse_gates(None, repr(-share - 1e-9), None)


@given(st.integers(0, 10_000))
def test_a_percentage_is_the_share_it_names_exactly(hundredths: int) -> None:
    """``95.2%`` is the share 0.952 to the last bit, as ``0.952`` is: a figure exactly at the threshold passes
    either way (the percentage read as 95.2 / 100 rounded twice, one bit above 0.952)."""
    percent, fraction = f"{hundredths // 100}.{hundredths % 100:02d}", f"{hundredths / 10_000:.4f}"
    [efficiency, loss, gap] = parse_gates(f"{percent}%", f"{percent}%", f"{percent}%")
    [as_fraction] = parse_gates(fraction, None, None)
    assert efficiency.limit == loss.limit == gap.limit == as_fraction.limit == hundredths / 10_000


def test_a_share_in_exponent_notation_is_read_and_what_is_no_number_is_refused() -> None:
    """``1e-2`` is the share 0.01 (Python writes small floats so: ``str(0.00001)`` is ``1e-05``), as ``1%`` is;
    ``nan``, ``inf``, a sign or an empty value is refused (exit 2 at the command line) naming the flag."""
    [efficiency, loss, gap] = parse_gates("1e-2", "2.5E-1%", "1e-3%")
    assert (efficiency.limit, loss.limit, gap.limit) == (0.01, 0.0025, 0.00001)
    [written] = parse_gates(f"{0.00001}", None, None)
    assert written.limit == 0.00001
    with pytest.raises(UsageError, match=r"^--max-loss '1e400' is above 1"):  # no float holds it: still one line
        parse_gates(None, "1e400", None)
    for bad in ("nan", "inf", "", "1e", "e-2", "0x1", "1/2", "--1", "+-1", "\u0663"):
        with pytest.raises(UsageError, match=r"^--min-efficiency '.*': give a share"):
            parse_gates(bad, None, None)


def test_a_gate_value_is_the_number_it_writes_signed_or_not() -> None:
    """Every gate reads its value as one number (optional sign, ASCII digits, decimal point, exponent), then holds it
    to its range: -0 is 0 and +0.5 is 0.5 (-0 was refused as no number while 0 was taken, and --max-gap took 3 but
    not 3.0); a negative value is refused as below 0, a fractional gap count as not whole."""
    for zero in ("0", "-0", "+0", "-0.0", "-0e5"):
        [efficiency, loss, gap] = parse_gates(zero, f"{zero}%", zero)
        assert [efficiency.limit, loss.limit, gap.limit] == [0.0, 0.0, 0.0] and not gap.relative
        assert math.copysign(1, efficiency.limit) == 1 and math.copysign(1, gap.limit) == 1
    [efficiency, loss, gap] = parse_gates("+0.5", "+50%", "+3")
    assert (efficiency.limit, loss.limit, gap.limit, gap.relative) == (0.5, 0.5, 3.0, False)
    assert [parse_gates(None, None, count)[0].limit for count in ("3.0", "1e2", "-0%")] == [3.0, 100.0, 0.0]
    tiny = "1e-99999999"  # read as the decimal it writes: 10 ** 99999999 is never computed (minutes, as a fraction)
    assert [gate.limit for gate in parse_gates(tiny, f"{tiny}%", f"{tiny}%")] == [0.0, 0.0, 0.0]
    with pytest.raises(UsageError, match=r"^--max-loss '1e99999999' is above 1"):
        parse_gates(None, "1e99999999", None)
    for flag, value in (("--min-efficiency", "-0.1"), ("--max-loss", "-1%"), ("--max-gap", "-3"), ("--max-gap", "-1%")):
        with pytest.raises(UsageError, match=rf"^{flag} '{re.escape(value)}' is below 0"):
            parse_gates(*[value if name == flag else None for name in ("--min-efficiency", "--max-loss", "--max-gap")])
    for value in ("0.5", "\u00b2", "\u0663", "x"):
        with pytest.raises(UsageError, match=r"^--max-gap '.*': give a whole number of sequences"):
            parse_gates(None, None, value)


def test_a_failed_gate_prints_its_figure_and_threshold_apart() -> None:
    """A figure just past its threshold is printed with the digits that tell them apart: a gap of 10 sequences over
    a lower bound of 4,544 read '0.22% sequences above the lower bound, above 0.22%' against --max-gap 0.22%."""
    efficiency, loss, gap = parse_gates("0.9988", "0.1%", "0.22%")
    assert [efficiency.reason(0.99878), loss.reason(0.0010004), gap.reason(10 / 4544)] == [
        "--min-efficiency: packing efficiency 99.878% is below 99.880%",
        "--max-loss: 0.10004% of the input tokens were dropped or truncated, above 0.10000%",
        "--max-gap: 0.2201% sequences above the lower bound, above 0.2200%",
    ]
    assert efficiency.reason(0.5) == "--min-efficiency: packing efficiency 50.00% is below 99.88%"


def test_an_efficiency_exactly_at_the_gate_passes(tmp_path: Path) -> None:
    """One row of 952 tokens (951 ids and the EOS) at max_len 1000: efficiency exactly 95.2%, which passes
    --min-efficiency 95.2% as it passes 0.952; 95.3% fails (exit 3)."""
    corpus = write_jsonl(tmp_path / "ids.jsonl", [{"ids": list(range(1, 952))}])
    out = str(tmp_path / "out")
    packed = invoke("pack", str(corpus), "--ids-field", "ids", "--eos-id", "0", "--max-len", "1000", "--out", out, "-q")
    assert packed.exit_code == 0, packed.stderr
    assert json.loads(invoke("stats", out, "--json").stdout)["packing"]["efficiency"] == 952 / 1000
    for threshold in ("95.2%", "0.952"):
        result = invoke("stats", out, "--min-efficiency", threshold, "-q")
        assert result.exit_code == 0, (threshold, result.stderr)
    assert invoke("stats", out, "--min-efficiency", "95.3%", "-q").exit_code == 3


def test_a_url_for_a_summary_or_plot_file_is_refused_before_any_work(
    corpus: Path, packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--summary and --plot write local files: a URL is refused at once (exit 2), never written as the local path it
    folds to (--summary s3://b/s.md appended to ./s3:/b/s.md after a whole pack)."""
    monkeypatch.chdir(tmp_path)
    for args in (
        ["pack", str(corpus), "--out", "out", "--summary", "s3://bucket/s.md"],
        ["verify", str(packed), "--summary", "s3://bucket/s.md"],
        ["stats", str(packed), "--plot", "s3://bucket/p.png"],
    ):
        result = invoke(*args)
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert "s3://bucket/" in result.output and "takes a local path" in result.output
        assert listing(tmp_path) == []


def test_a_plot_that_cannot_be_written_fails_before_any_work(
    corpus: Path, packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plot in a directory that does not exist fails at once, exit 1, one line naming it: it once failed after the
    whole run, a raw corpus tokenized."""
    monkeypatch.chdir(tmp_path)
    cache = Path(os.environ["PACKCLI_CACHE"])
    cached = sorted(cache.iterdir()) if cache.exists() else []
    result = invoke("stats", str(corpus), "--max-len", "512", "--plot", "no-such-dir/p.png")
    assert result.exit_code == 1 and result.stdout == "", result.output
    assert error_line(result.stderr).startswith("error: no-such-dir/p.png: cannot write the ")
    assert listing(tmp_path) == []
    assert (sorted(cache.iterdir()) if cache.exists() else []) == cached  # nothing tokenized


def summary_warning(stderr: str, named: str) -> bool:
    """Whether ``stderr`` holds the one warning line of a summary that could not be written to ``named``."""
    return any(line.startswith(f"warning: {named}: cannot write the summary (") for line in stderr.splitlines())


@pytest.mark.parametrize("where", ["/dev/full", "a-directory", "no-such-dir/s.md"])
def test_a_summary_that_cannot_be_written_is_a_warning_and_the_commands_result_stands(
    where: str, corpus: Path, packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unwritable $GITHUB_STEP_SUMMARY (a full disk: /dev/full takes the open and fails the write; a directory; a
    missing directory) or --summary FILE is one warning line: a failed gate still exits 3 with its message and its
    --json object, pack still exits 0 with its object after it published, verify still says OK. It turned the gate's
    exit 3 into 1, hid its message and its object, and made pack exit 1 after it published."""
    monkeypatch.chdir(tmp_path)
    Path("a-directory").mkdir()
    for env, flags in (({"GITHUB_STEP_SUMMARY": where}, []), ({}, ["--summary", where])):
        gate = invoke("stats", str(packed), "--min-efficiency", "100%", "--json", *flags, env=env)
        assert gate.exit_code == 3 and json.loads(gate.stdout)["gates"][0]["passed"] is False, gate.output
        assert f"error: {packed}: gate failed: --min-efficiency" in gate.stderr and summary_warning(gate.stderr, where)
        out = tmp_path / "out"
        packing = invoke(
            "pack", str(corpus), "--max-len", "512", "--out", str(out), "--json", "--quiet", *flags, env=env
        )
        assert packing.exit_code == 0 and json.loads(packing.stdout)["status"] in ("packed", "up-to-date"), (
            packing.output
        )
        assert (out / "manifest.json").is_file() and summary_warning(packing.stderr, where)
        checked = invoke("verify", str(packed), *flags, env=env)
        assert checked.exit_code == 0 and ": OK (" in checked.stdout and summary_warning(checked.stderr, where)
        assert len(checked.stderr.splitlines()) == 1, checked.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a-directory", "out"]
    assert not any(Path("a-directory").iterdir())


def test_summary_file_takes_precedence_over_the_step_summary(tmp_path: Path, packed: Path) -> None:
    """--summary FILE is where the summary goes, $GITHUB_STEP_SUMMARY only without it: a step that names its own
    file gets its summary there alone, and an unwritable variable then costs nothing (not even a warning)."""
    github, mine = tmp_path / "step-summary.md", tmp_path / "mine.md"
    result = invoke("verify", str(packed), "--summary", str(mine), env={"GITHUB_STEP_SUMMARY": str(github)})
    assert result.exit_code == 0 and "### packcli verify" in mine.read_text() and not github.exists()
    unwritable = {"GITHUB_STEP_SUMMARY": str(tmp_path / "no-such-dir" / "s.md")}
    result = invoke("stats", str(packed), "--summary", str(mine), env=unwritable)
    assert result.exit_code == 0 and result.stderr == "" and "### packcli stats" in mine.read_text()
    result = invoke("verify", str(packed), env={"GITHUB_STEP_SUMMARY": str(github)})
    assert result.exit_code == 0 and "### packcli verify" in github.read_text()


def test_verify_json_on_a_damaged_output_still_says_why_it_failed_on_stderr(tmp_path: Path, packed: Path) -> None:
    """`verify --json > report.json` in a CI step: stdout is the one object, and the log still gets the one line
    that says the step failed (it got nothing, as `stats --json` with a failed gate gets its line)."""
    damaged = tmp_path / "damaged"
    shutil.copytree(packed, damaged)
    shard = damaged / "shard-00000.arrow"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    result = invoke("verify", str(damaged), "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["ok"] is False
    assert error_line(result.stderr) == f"error: {damaged}: {report['problem_count']} problem(s) found"
    assert invoke("verify", str(packed), "--json").stderr == ""


def test_a_restored_output_with_a_shard_cut_short_is_not_called_another_runs(
    tmp_path: Path, corpus: Path, packed: Path
) -> None:
    """A cache restored with a shard cut short has this run's fingerprint: the dry run and the run refuse it alike,
    and their words allow for it (they said 'other inputs, tokenizer or options', which were the same)."""
    out = tmp_path / "out"
    shutil.copytree(packed, out)
    shard = out / "shard-00000.arrow"
    shard.write_bytes(shard.read_bytes()[:-10])
    args = ["pack", str(corpus), "--max-len", "512", "--out", str(out), "--quiet"]
    dry, real = invoke(*args, "--dry-run", "--json"), invoke(*args)
    for result in (dry, real):
        assert result.exit_code == 1 and result.stdout == "" and error_line(result.stderr), result.output
        assert (
            "or this run's output with a shard missing, not its listed size, listed twice or out of order, or not listed"
            in result.stderr
        )
    assert "--overwrite" in dry.stderr and "--overwrite" in real.stderr
    assert invoke(*args, "--overwrite").exit_code == 0 and invoke("verify", str(out)).exit_code == 0


def test_the_stats_summary_counts_documents_and_pieces_as_the_terminal_does(tmp_path: Path, packed_text: Path) -> None:
    """A split document is one document in several pieces: the Markdown says "N in M pieces", as the terminal
    report does, never the pieces alone under the name documents."""
    summary = tmp_path / "summary.md"
    figures = json.loads(invoke("stats", str(packed_text), "--json", "--summary", str(summary)).stdout)
    assert figures["split_documents"] and figures["documents"] > figures["input_documents"]
    said = f"{figures['input_documents']:,} documents in {figures['documents']:,} pieces / {figures['tokens']:,}"
    assert f"| documents / tokens | {said} |" in summary.read_text()
    terminal = invoke("stats", str(packed_text)).stdout
    assert f"{figures['input_documents']:,} documents in {figures['documents']:,} pieces" in terminal
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": "word " * n} for n in (2, 30, 3, 40, 4)])
    assert (
        invoke("pack", str(corpus), "--max-len", "16", "--overflow", "drop", "--out", str(tmp_path / "d")).exit_code
        == 0
    )
    invoke("stats", str(tmp_path / "d"), "--summary", str(summary))
    assert "| documents / tokens | 3 of 5 documents (2 dropped) / 15 |" in summary.read_text()  # the tokens kept
