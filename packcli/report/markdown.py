"""A short Markdown summary of ``pack``, ``stats`` and ``verify`` for people reading a CI run: what was packed, the
packing efficiency, what was lost, the warnings, the gates.

Where it goes: appended to ``--summary FILE`` where given, else to ``$GITHUB_STEP_SUMMARY`` where that is set (GitHub
Actions shows it on the run's page). Never on stdout, so ``--json`` keeps stdout to its one object. A file that
cannot be written is the command line's to report (a warning: the command's own result stands).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packcli.errors import PackcliError
from packcli.report.terminal import count, documents_phrase, token_loss
from packcli.util.files import unwritable

__all__ = [
    "GITHUB_SUMMARY",
    "append_summary",
    "check_summary",
    "pack_markdown",
    "stats_markdown",
    "summary_target",
    "verify_markdown",
]

GITHUB_SUMMARY = "GITHUB_STEP_SUMMARY"
MAX_WARNINGS = 10  # warnings listed in a summary; the rest are counted


def summary_target(summary: Path | None) -> Path | None:
    """Where the summary goes: ``summary`` (``--summary FILE``) where given, else ``$GITHUB_STEP_SUMMARY`` where set."""
    if summary is not None:
        return summary
    return Path(os.environ[GITHUB_SUMMARY]) if os.environ.get(GITHUB_SUMMARY) else None


def check_summary(target: Path) -> None:
    """Before a command's work: ``target`` can be written.

    Raises:
        PackcliError: it cannot, named, with the system's reason.
    """
    reason = unwritable(target)
    if reason is not None:
        raise PackcliError(f"cannot write the summary ({reason})", target)


def append_summary(markdown: str, target: Path) -> None:
    """Append ``markdown`` to ``target``.

    Raises:
        PackcliError: it cannot be written, named, with the system's reason.
    """
    try:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(markdown.rstrip("\n") + "\n\n")
    except OSError as exc:
        raise PackcliError(f"cannot write the summary ({exc.strerror or exc})", target) from None


def _lost(figures: dict[str, Any]) -> str:
    lost, total = token_loss(figures)
    share = f" ({lost / total:.2%} of the input tokens)" if total else ""
    return f"{lost:,} tokens{share}" if lost else "none"


def _warnings(warnings: Sequence[str], total: int) -> list[str]:
    if not total:
        return []
    lines = ["", f"**{count(total, 'warning')}**", ""]
    lines += [f"- {message}" for message in warnings[:MAX_WARNINGS]]
    if total > min(len(warnings), MAX_WARNINGS):
        lines.append(f"- ... and {total - min(len(warnings), MAX_WARNINGS):,} more (see the log)")
    return lines


def _table(rows: list[tuple[str, str]]) -> list[str]:
    return ["| | |", "| --- | --- |", *(f"| {name} | {value} |" for name, value in rows)]


def pack_markdown(summary: dict[str, Any], out: object, warnings: Sequence[str], warning_count: int) -> str:
    """``pack``: the run's status, what went in and out, efficiency, losses and warnings (``summary``: the
    ``pack --json`` object; ``warnings``: the messages shown on stderr, of ``warning_count`` in all)."""
    capacity = summary["sequences"] * summary["max_len"]
    status = "up to date (nothing to do)" if summary["status"] == "up-to-date" else "packed"
    rows = [
        ("status", status),
        ("documents", f"{summary.get('input_documents', summary['documents']):,} in, {summary['documents']:,} out"),
        ("tokens", f"{summary['tokens']:,}"),
        (
            "sequences",
            f"{summary['sequences']:,} of max_len {summary['max_len']:,}, {count(summary['shards'], 'shard')}",
        ),
        ("packing efficiency", f"**{summary['tokens'] / capacity:.2%}**" if capacity else "-"),
        ("lost (dropped or truncated)", _lost(summary)),
        ("bad records skipped", f"{summary.get('bad_records', 0):,}"),
        ("empty documents", f"{summary.get('empty_documents', 0):,}"),
        ("strategy", summary["strategy"]),
        ("fingerprint", f"`{summary['fingerprint']}`"),
    ]
    if "partitions" in summary:
        rows.append(("partitions", f"{summary['partitions']:,}"))
    return "\n".join([f"### packcli pack: `{out}`", "", *_table(rows), *_warnings(warnings, warning_count)])


def stats_markdown(figures: dict[str, Any], title: str, gates: Sequence[dict[str, Any]]) -> str:
    """``stats``: efficiency against the padded baseline, the lower bound, losses, and each gate's verdict."""
    random = figures["pad_to_longest"]
    rows = [
        ("packing efficiency", f"**{figures['packing']['efficiency']:.2%}** ({figures['strategy']})"),
        (
            f"random batches of {random['batch_size']}, padded",
            f"{random['efficiency']:.2%} ({figures['compute_saved']['vs_pad_to_longest']:.2f}x the compute)",
        ),
        (
            "sequences",
            f"{figures['sequences']:,} (lower bound {figures['lower_bound_sequences']:,}, gap "
            f"{figures['gap_to_lower_bound']:,})",
        ),
        ("documents / tokens", f"{documents_phrase(figures)} / {figures['tokens']:,}"),
        ("lost (dropped or truncated)", _lost(figures)),
    ]
    lines = [f"### packcli stats: `{title}`", "", *_table(rows)]
    if gates:
        lines += ["", "| gate | threshold | value | |", "| --- | --- | --- | --- |"]
        for gate in gates:
            value = gate["value"]
            shown = f"{value:.2%}" if gate["unit"] == "share" else f"{value:,.0f}"
            verdict = "pass" if gate["passed"] else "**FAIL**"
            lines.append(f"| `{gate['gate']}` | {gate['threshold']} | {shown} | {verdict} |")
    return "\n".join(lines)


def verify_markdown(report: dict[str, Any], path: object) -> str:
    """``verify``: OK with what was checked, or the problems found (``report``: the ``verify --json`` object)."""
    heading = f"### packcli verify: `{path}`"
    if report["ok"]:
        checked = f"{count(report['shards'], 'shard')}, {count(report['rows'], 'sequence')}, {report['tokens']:,}"
        return f"{heading}\n\nOK: every invariant and checksum holds ({checked} tokens checked)."
    lines = [heading, "", f"**FAILED: {count(report['problem_count'], 'problem')}**", ""]
    lines += [f"- {problem}" for problem in report["problems"]]
    if report["problem_count"] > len(report["problems"]):
        lines.append(f"- ... and {report['problem_count'] - len(report['problems']):,} more")
    return "\n".join(lines)
