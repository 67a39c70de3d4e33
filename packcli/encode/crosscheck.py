"""The cross-check: proof on the user's own data that the fast backend encodes as Hugging Face ``tokenizers`` does.

A seeded sample of each batch's texts is encoded again with Hugging Face and compared id for id; a difference
stops the run (:class:`TokenizerMismatch`, which the corpus loop turns into an error naming the document's file
and line). The sample is bounded by time: the checking may take about SHARE of the time since the first batch,
plus the first MIN_CHECKED texts, which are always checked (a short run is checked whole or nearly) as long as
they hold at most MIN_CHARACTERS in all (a free minimum of whole source files would cost more than the run's
encoding: 32 files of the CPython library took 0.25 s, a tenth of the run).
Invariant: the check never changes a token; it only reads the backend's ids and stops the run on a difference.
"""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np

from packcli.encode.backends import Backend, HFBackend
from packcli.errors import PackcliError

__all__ = ["MIN_CHARACTERS", "MIN_CHECKED", "SHARE", "CrossCheck", "TokenizerMismatch"]

SHARE = 0.01  # of the run's time, spent encoding the sample again with Hugging Face
MIN_CHECKED = 32  # texts checked whatever the time...
MIN_CHARACTERS = 1 << 16  # ...while they hold no more than this (about 50 ms of Hugging Face)
_CANDIDATES = 64  # texts of one batch considered, in a seeded random order
_FIRST_RATE = 1e6  # characters per second Hugging Face is assumed to encode before it is measured


class TokenizerMismatch(PackcliError):
    """The backend's ids of one text differ from Hugging Face's. ``index``: the text in its batch; the encoder
    sets ``document`` (the prepared document holding it) so the corpus loop can name its file and line."""

    def __init__(self, backend: str, index: int, position: int, got: int | None, expected: int | None) -> None:
        shown = "no token" if got is None else str(got)
        wanted = "no token" if expected is None else str(expected)
        super().__init__(
            f"the {backend} tokenizer backend encodes this document otherwise than Hugging Face tokenizers (token "
            f"{position}: {shown}, expected {wanted}); rerun with --tokenizer-backend hf"
        )
        self.index = index
        self.document: Any = None


class CrossCheck:
    """Checks a bounded, seeded sample of every batch (one instance per run, used by one thread at a time)."""

    def __init__(self, backend: str, seed: int) -> None:
        self.backend = backend
        self.random = random.Random(seed)
        self.started: float | None = None
        self.spent = 0.0  # seconds spent encoding with Hugging Face
        self.checked = 0  # texts checked
        self.free_characters = MIN_CHARACTERS  # left of the minimum's characters
        self.rate = _FIRST_RATE  # characters per second, as measured

    def verify(self, texts: list[str], backend: Backend, encoded: Any, reference: HFBackend) -> None:
        """Compare the sample of ``texts`` that the budget allows with Hugging Face's ids.

        Raises:
            TokenizerMismatch: the backend's ids of a sampled text differ.
        """
        now = time.perf_counter()
        if self.started is None:
            self.started = now
        picks = self._sample(texts, SHARE * (now - self.started) - self.spent)
        if not picks:
            return
        tokens, lengths = backend.ids(encoded)
        starts = np.concatenate(([0], np.cumsum(lengths)))
        before = time.perf_counter()
        expected = reference.id_lists([texts[k] for k in picks])
        seconds = time.perf_counter() - before
        self.spent += seconds
        self.checked += len(picks)
        characters = sum(len(texts[k]) for k in picks)
        if seconds > 0 and characters:
            self.rate = characters / seconds
        for k, want in zip(picks, expected):
            got = tokens[starts[k] : starts[k + 1]].tolist()
            if got != want:
                position = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                raise TokenizerMismatch(
                    self.backend,
                    k,
                    position,
                    got[position] if position < len(got) else None,
                    want[position] if position < len(want) else None,
                )

    def _sample(self, texts: list[str], allowance: float) -> list[int]:
        """Texts to check: seeded random candidates, each taken while the time allowance (in characters at the
        measured rate) lasts, or while fewer than MIN_CHECKED were checked and the minimum's characters last."""
        budget = allowance * self.rate
        picks: list[int] = []
        for k in self.random.sample(range(len(texts)), min(len(texts), _CANDIDATES)):
            if self.checked + len(picks) < MIN_CHECKED and len(texts[k]) <= self.free_characters:
                picks.append(k)
                self.free_characters -= len(texts[k])
            elif len(texts[k]) <= budget:
                picks.append(k)
                budget -= len(texts[k])
        return sorted(picks)
