"""The cross-check: proof on the user's own data that the fast backend encodes as Hugging Face ``tokenizers`` does.

A seeded sample of the run's texts is encoded again with Hugging Face and compared id for id; a difference stops
the run (:class:`TokenizerMismatch`, which the corpus loop turns into an error naming the document's file and
line). The sample is bounded in characters: the first MIN_CHECKED texts are always checked (a short run is checked
whole or nearly) as long as they hold at most MIN_CHARACTERS in all (a free minimum of whole source files would
cost more than the run's encoding: 32 files of the CPython library took 0.25 s, a tenth of the run); after them,
every CHARACTERS_PER_CHECKED characters read earn one character of checking, spent on candidates drawn at seeded
random gaps, each checked when the credit earned so far covers it. (Hugging Face is about 20 times slower than the
fast backend, so this is about 1% of a run's time; measured in docs/cli.md.)

Invariants: the check never changes a token; it only reads the backend's ids and stops the run on a difference.
The documents checked depend on the seed and on the texts in order alone (integer arithmetic, no clock), not on
how the texts were batched or how long encoding took: a rerun, with any ``--workers``, checks the same ones.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from packcli.encode.backends import Backend, HFBackend
from packcli.errors import PackcliError, option

__all__ = ["CHARACTERS_PER_CHECKED", "MEAN_GAP", "MIN_CHARACTERS", "MIN_CHECKED", "CrossCheck", "TokenizerMismatch"]

CHARACTERS_PER_CHECKED = 2000  # characters read per character checked, after the free minimum
MIN_CHECKED = 32  # texts checked first, whatever their share...
MIN_CHARACTERS = 1 << 16  # ...while they hold no more than this (about 50 ms of Hugging Face)
MEAN_GAP = 256  # texts from one candidate to the next, on average, after the free minimum


class TokenizerMismatch(PackcliError):
    """The backend's ids of one text differ from Hugging Face's at token ``position`` of the text. ``index``: the
    text in its batch; the encoder sets ``document`` (the prepared document holding it) so the corpus loop can name
    its file and line."""

    def __init__(self, backend: str, index: int, position: int, got: int | None, expected: int | None) -> None:
        shown = "no token" if got is None else str(got)
        wanted = "no token" if expected is None else str(expected)
        super().__init__(
            f"the {backend} tokenizer backend encodes this document otherwise than Hugging Face tokenizers (token "
            f"{position}: {shown}, expected {wanted}); rerun with {option('tokenizer_backend', 'hf')}"
        )
        self.backend, self.index, self.position, self.got, self.expected = backend, index, position, got, expected
        self.document: Any = None

    def counted_from(self, tokens_before: int) -> TokenizerMismatch:
        """The same mismatch with its position counted ``tokens_before`` tokens earlier: from the document's first
        token when the text is one segment of a fine-tuning record (a response, a chat turn)."""
        return TokenizerMismatch(self.backend, self.index, self.position + tokens_before, self.got, self.expected)


class CrossCheck:
    """Checks a bounded, seeded sample of a run's texts, batch by batch (one instance per run, used by one thread
    at a time)."""

    def __init__(self, backend: str, seed: int) -> None:
        self.backend = backend
        self.random = random.Random(seed)
        self.checked = 0  # texts checked
        self.minimum_left = MIN_CHECKED  # texts of the free minimum still to come
        self.free_characters = MIN_CHARACTERS  # left of the minimum's characters
        self.earned = 0  # characters read so far (up to the current candidate): CHARACTERS_PER_CHECKED earn one
        self.spent = 0  # characters checked after the free minimum
        self.next_candidate = 0  # the next candidate text, counted from the start of the next batch

    def verify(self, texts: list[str], backend: Backend, encoded: Any, reference: HFBackend) -> None:
        """Compare the sample's texts among ``texts`` (the run's next batch) with Hugging Face's ids.

        Raises:
            TokenizerMismatch: the backend's ids of a sampled text differ.
        """
        picks = self.sample(texts)
        if not picks:
            return
        tokens, lengths = backend.ids(encoded)
        starts = np.concatenate(([0], np.cumsum(lengths)))
        expected = reference.id_lists([texts[k] for k in picks])
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

    def sample(self, texts: list[str]) -> list[int]:
        """The texts of this batch to check (indices, in order); the run's state moves past the batch.

        A candidate is checked while the free minimum lasts (the next candidate is then the next text), or when the
        characters earned so far, its own included, cover it (the next candidate is then a seeded gap away)."""
        sizes = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        read = np.cumsum(sizes)  # characters of the batch up to each text, included
        credited = 0  # characters of the batch already added to ``earned``
        picks: list[int] = []
        k = self.next_candidate
        while k < len(texts):
            size = int(sizes[k])
            if self.minimum_left:  # a text of the free minimum: checked if it fits, passed over if not
                self.minimum_left -= 1
                if size <= self.free_characters:
                    self.free_characters -= size
                    self.checked += 1
                    picks.append(k)
                k += 1
                continue
            self.earned += int(read[k]) - credited
            credited = int(read[k])
            if (self.spent + size) * CHARACTERS_PER_CHECKED <= self.earned:
                self.spent += size
                self.checked += 1
                picks.append(k)
            k += 1 + self.random.randrange(2 * MEAN_GAP - 1)
        self.earned += (int(read[-1]) - credited) if len(texts) else 0
        self.next_candidate = k - len(texts)
        return picks
