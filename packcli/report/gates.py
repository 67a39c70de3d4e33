"""Gates: thresholds on the ``packcli stats`` figures that fail a CI step, each with a one-line reason.

``--min-efficiency E`` (packing efficiency: tokens over sequences * max_len), ``--max-loss F`` (the share of the
input tokens dropped or truncated) and ``--max-gap N`` (sequences above the lower bound ``ceil(tokens / max_len)``:
a whole number of sequences, or with ``%`` a share of the lower bound). Shares are written ``0.95`` (or ``1e-2``)
or ``95%``. Every value is read as one number (an optional sign, ASCII digits, a decimal point, an exponent: ``-0``
is 0, ``+3`` is 3, ``3.0`` a whole 3), then held to its gate's range.

Invariants: a threshold no figure can meet or miss (an efficiency above 1 or below 0, a negative loss or gap, a
fractional gap count) is a usage error before any work; a gate on a packed output first passes verify's cheap
checks (manifest, the shards' presence and sizes, the totals against what ``stats`` reads), so a damaged output is
reported as damaged, never as a poor packing; a failing gate exits ``EXIT_GATE`` (3), apart from data errors (1) and
usage errors (2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from packcli.errors import EXIT_GATE, PackcliError, UsageError
from packcli.format.integrity import file_damage
from packcli.format.manifest import read_manifest
from packcli.report.accounting import Observed, check_totals
from packcli.report.stats import Measured, measure_output
from packcli.report.terminal import token_loss
from packcli.storage.urls import file_sizes

__all__ = ["Gate", "GateFailed", "check_gates", "failure", "measure_checked", "parse_gates"]

_NUMBER = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")  # 0.95, -0, .95, 95., 1e-2: no nan, inf
_SHARE = "give a share between 0 and 1 (0.95) or a percentage (95%)"
_GAP = "give a whole number of sequences (3) or a share of the lower bound (2%)"


class GateFailed(PackcliError):
    """One or more gates failed: exit ``EXIT_GATE`` (3), apart from data (1) and usage (2) errors."""

    exit_code = EXIT_GATE


@dataclass(frozen=True)
class Gate:
    """One threshold: ``flag`` as on the command line, ``given`` as the user wrote it, ``limit`` parsed (a share,
    or for ``--max-gap`` a count unless ``relative``)."""

    flag: str
    given: str
    limit: float
    relative: bool = True

    def measure(self, figures: dict[str, Any]) -> float:
        """This gate's figure: efficiency, lost share, or the gap (count, or share of the lower bound)."""
        if self.flag == "--min-efficiency":
            return float(figures["packing"]["efficiency"])
        if self.flag == "--max-loss":
            lost, total = token_loss(figures)
            return lost / total if total else 0.0
        gap, lower = figures["gap_to_lower_bound"], figures["lower_bound_sequences"]
        return (gap / lower if lower else 0.0) if self.relative else float(gap)

    def passes(self, value: float) -> bool:
        return value >= self.limit if self.flag == "--min-efficiency" else value <= self.limit

    def check(self, figures: dict[str, Any]) -> dict[str, Any]:
        """The ``gates`` entry of ``stats --json``: the gate, its threshold as given, its figure (``unit``: a share,
        or a count of sequences) and whether it passed."""
        value = self.measure(figures)
        unit = "share" if self.relative else "sequences"
        return {"gate": self.flag, "threshold": self.given, "value": value, "unit": unit, "passed": self.passes(value)}

    def reason(self, value: float) -> str:
        """Why the gate failed, naming the figure, its value and the threshold (as shares: with the digits that
        tell them apart)."""
        shown, limit = _apart(value, self.limit)
        if self.flag == "--min-efficiency":
            return f"--min-efficiency: packing efficiency {shown} is below {limit}"
        if self.flag == "--max-loss":
            return f"--max-loss: {shown} of the input tokens were dropped or truncated, above {limit}"
        if self.relative:
            return f"--max-gap: {shown} sequences above the lower bound, above {limit}"
        return f"--max-gap: {int(value):,} sequences above the lower bound, above {int(self.limit):,}"


def _apart(value: float, limit: float) -> tuple[str, str]:
    """``value`` and ``limit`` as percentages with two decimals, or as many more as tell them apart (up to 10)."""
    for decimals in range(2, 11):
        shown, threshold = f"{value:.{decimals}%}", f"{limit:.{decimals}%}"
        if shown != threshold:
            break
    return shown, threshold


def parse_gates(min_efficiency: str | None, max_loss: str | None, max_gap: str | None) -> list[Gate]:
    """The gates given, in flag order.

    Raises:
        UsageError: a value that is not a number, a share outside 0..1 (0%..100%), or a gap that is neither a whole
            number of sequences nor a percentage.
    """
    gates = []
    if min_efficiency is not None:
        gates.append(Gate("--min-efficiency", min_efficiency, _share("--min-efficiency", min_efficiency)))
    if max_loss is not None:
        gates.append(Gate("--max-loss", max_loss, _share("--max-loss", max_loss)))
    if max_gap is not None:
        if max_gap.strip().endswith("%"):
            gates.append(Gate("--max-gap", max_gap, _share("--max-gap", max_gap)))
        else:
            count = _number("--max-gap", max_gap, max_gap.strip(), _GAP)
            if count != count.to_integral_value():
                raise UsageError(f"--max-gap {max_gap!r}: {_GAP}")
            gates.append(Gate("--max-gap", max_gap, float(count), relative=False))
    return gates


def _share(flag: str, given: str) -> float:
    """A share written ``0.95`` or ``95%``, exactly: ``95.2%`` is the float nearest 0.952, as ``0.952`` is."""
    text = given.strip()
    percent = text.endswith("%")
    exact = _number(flag, given, text[:-1].strip() if percent else text, _SHARE)
    if percent:  # the decimal point moved, exactly: float("95.2") / 100 rounds twice and lands a bit above 0.952
        sign, digits, exponent = exact.as_tuple()
        exact = Decimal((sign, digits, int(exponent) - 2))
    if exact > 1:  # compared before float(), which no float holds for 1e400
        raise UsageError(f"{flag} {given!r} is above 1 (100%): no packing can have such a share")
    return float(exact)


def _number(flag: str, given: str, text: str, hint: str) -> Decimal:
    """The number ``text`` writes, exactly (a decimal: ``1e-99999999`` costs no more than ``0.01``), at least 0
    (``-0`` is 0).

    Raises:
        UsageError: no number (``hint`` says what to give), or one below 0.
    """
    if not _NUMBER.fullmatch(text):
        raise UsageError(f"{flag} {given!r}: {hint}")
    value = Decimal(text)
    if value < 0:
        raise UsageError(f"{flag} {given!r} is below 0: no packing can have such a figure")
    return value.copy_abs()  # -0 is 0, exactly


def check_gates(gates: list[Gate], figures: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """Each gate's entry (see :meth:`Gate.check`); the caller raises :func:`failure` on those that failed."""
    unknown_loss = figures.get("dropped_documents") and "dropped_tokens" not in figures
    if unknown_loss and any(gate.flag == "--max-loss" for gate in gates):
        raise PackcliError(
            "--max-loss: the manifest counts dropped documents but not their tokens (totals.dropped_tokens): "
            "repack with this packcli",
            where,
        )
    return [gate.check(figures) for gate in gates]


def failure(gates: list[Gate], results: list[dict[str, Any]], where: str) -> GateFailed | None:
    """One error naming every failed gate, its figure and its threshold; None when all passed."""
    failed = [gate.reason(result["value"]) for gate, result in zip(gates, results) if not result["passed"]]
    return GateFailed("gate failed: " + "; ".join(failed), where) if failed else None


def measure_checked(out: Path, batch_size: int, seed: int) -> Measured:
    """``measure_output`` behind verify's cheap checks: its names and sizes (:mod:`packcli.format.integrity`) before
    any shard is read, then the manifest's totals against what was read (the identities ``verify`` checks, without
    the ids).

    Raises:
        PackcliError: the output fails a check (the first problem named, and ``packcli verify`` for the rest).
    """
    manifest = read_manifest(out)
    problems = [str(damage) for damage in file_damage(manifest, file_sizes(out))]
    measured = None
    if not problems:
        measured = measure_output(out, batch_size, seed)
        figures = measured.figures
        observed = Observed(
            sequences=figures["sequences"],
            documents=figures["documents"],
            tokens=figures["tokens"],
            supervised_tokens=figures.get("supervised_tokens", 0),
            unsupervised_sequences=figures.get("unsupervised_sequences", 0),
            labelled="supervised_tokens" in figures,
            full_pieces=int(np.count_nonzero(measured.lengths == figures["max_len"])),
        )
        problems = check_totals(manifest, observed, eos_appended=False)
    if problems or measured is None:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PackcliError(f"fails verify's checks: {problems[0]}{more}; run packcli verify on it", out)
    return measured
