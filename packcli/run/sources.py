"""Sources of a mixed run: every INPUT (a file, a directory or a glob) is one source. The mixed stream of store
documents that is packed (a repeated one as often as it was drawn; one that ``--overflow drop`` removes enters once,
counted as dropped as in an unmixed run), and the manifest's per-source entries, which add up to the totals. A
mixture larger than memory fails where it allocates, said in one line (``error: out of memory (...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packcli.errors import PackcliError, UsageError, option
from packcli.format.manifest import recorded_name
from packcli.options import PackOptions
from packcli.packing.mixing import Draw, interleave, mix, normalised
from packcli.packing.overflow import Pieces, output_lengths
from packcli.read.inputs import FileIdentity, file_identity, find_inputs

__all__ = ["Source", "group_inputs", "manifest_weights", "mixed_stream", "source_entries"]


@dataclass(frozen=True)
class Source:
    """One INPUT as given, the files it resolved to, how many found beside them packcli does not read, and the name
    the manifest gives it (the spec, as :func:`~packcli.format.manifest.recorded_name` records a name, or
    ``<stdin>`` for standard input's spool)."""

    spec: str
    files: list[Path]
    unread: int = 0
    name: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", recorded_name(self.spec))


def group_inputs(
    specs: Sequence[str], weights: Sequence[float] | None, warn: Callable[[str], None] = lambda message: None
) -> list[Source]:
    """Resolve each INPUT on its own; a file (by device and inode) belongs to one source only.

    Raises:
        UsageError: the weights do not match the inputs in number, or two inputs share a file.
    """
    if weights is not None and len(weights) != len(specs):
        raise UsageError(
            f"{option('weights')} has {len(weights)} value(s) for {len(specs)} input(s): give one weight per INPUT "
            "(a directory or a glob is one input)"
        )
    found = [find_inputs([spec], warn) for spec in specs]
    sources = [Source(spec, inputs.files, len(inputs.unread)) for spec, inputs in zip(specs, found)]
    owner: dict[FileIdentity, int] = {}  # file -> the input it came from (the same spelling twice is two inputs)
    for number, source in enumerate(sources):
        for path in source.files:
            first = owner.setdefault(file_identity(path), number)
            if first != number:
                raise UsageError(
                    f"{path} is in two inputs, {sources[first].spec!r} (input {first + 1}) and {source.spec!r} "
                    f"(input {number + 1}): a file belongs to one source when mixing"
                )
    return sources


@dataclass(frozen=True)
class Stream:
    """The documents to pack, in order: store document indices with their source, and each source's draw."""

    documents: np.ndarray
    source: np.ndarray
    draws: list[Draw]
    weights: list[float]  # normalised


def mixed_stream(
    sources: list[Source], file_documents: np.ndarray, lengths: np.ndarray, options: PackOptions
) -> Stream:
    """Draw every source's documents on the tokens each puts into the output after overflow, and interleave them."""
    first = _first_documents(sources, file_documents)
    effective = output_lengths(lengths, options.max_len, options.overflow_policy)
    per_source = [effective[first[k] : first[k + 1]] for k in range(len(sources))]
    # Without --weights (only --target-tokens), sources keep their natural proportions.
    weights = list(options.weights) if options.weights is not None else [float(part.sum()) for part in per_source]
    for given, part, weight in zip(sources, per_source, options.weights or [1.0] * len(sources)):
        if weight > 0 and not part.any():
            raise PackcliError(
                f"no document of this input can go into the output: {_why_none_fits(len(part), options)}; give it "
                "weight 0 or fix it",
                given.spec,
            )
    draws = mix(per_source, weights, options.target_tokens, options.seed)
    source, position = interleave([len(draw.documents) for draw in draws])
    drawn = np.concatenate([first[k] + draw.documents for k, draw in enumerate(draws)])
    starts = np.cumsum([0] + [len(draw.documents) for draw in draws])
    documents = drawn[starts[source] + position]
    # Documents too long to place enter once, so that overflow counts them (not in an input of weight 0).
    used = np.repeat(np.asarray(options.weights or weights) > 0, np.diff(first))
    left_out = np.flatnonzero(used & (effective == 0))
    owner = np.searchsorted(first, left_out, side="right") - 1
    return Stream(
        np.concatenate([documents, left_out]).astype(np.int64),
        np.concatenate([source, owner]).astype(np.int64),
        draws,
        normalised(weights),
    )


def _why_none_fits(documents: int, options: PackOptions) -> str:
    """Why an input of ``documents`` documents puts no token into the output. An empty record is no document (it is
    counted in ``empty_documents``), and under split or truncate every document puts in some tokens: so either the
    input holds none, or the drop policy left out every one."""
    if not documents:
        return "it holds none (no record, or only empty ones, counted as empty documents)"
    return (
        f"its {documents:,} document(s) are all too long for {option('max_len', options.max_len)} with "
        f"{option('overflow')} drop"
    )


def _first_documents(sources: list[Source], file_documents: np.ndarray) -> np.ndarray:
    """The document at which each source starts (files are tokenized source after source), plus the end."""
    files_per_source = [len(source.files) for source in sources]
    file_bounds = np.cumsum([0, *np.asarray(file_documents, dtype=np.int64)])
    return np.asarray(file_bounds[np.cumsum([0, *files_per_source])], dtype=np.int64)


def source_entries(
    sources: list[Source], stream: Stream, file_documents: np.ndarray, lengths: np.ndarray, pieces: Pieces
) -> list[dict[str, Any]]:
    """The manifest's ``sources``: per input, what it held and what the output took of it."""
    first = _first_documents(sources, file_documents)
    count = len(sources)
    piece_source = stream.source[pieces.document]
    output_documents = np.bincount(piece_source, minlength=count)
    output_tokens = np.bincount(piece_source, weights=pieces.length, minlength=count).astype(np.int64)
    total_tokens = int(pieces.length.sum())
    return [
        {
            "path": source.name,
            "files": len(source.files),
            "weight": _significant(stream.weights[k]),
            "input_documents": int(first[k + 1] - first[k]),
            "input_tokens": int(lengths[first[k] : first[k + 1]].sum()),
            "output_documents": int(output_documents[k]),
            "output_tokens": int(output_tokens[k]),
            "share": _significant(int(output_tokens[k]) / total_tokens) if total_tokens else 0.0,
            "passes": draw.passes,
            "repeats": _significant(draw.tokens / draw.total) if draw.total else 0.0,
        }
        for k, (source, draw) in enumerate(zip(sources, stream.draws))
    ]


def manifest_weights(weights: Sequence[float]) -> list[float]:
    """The weights as the manifest's ``sources`` gives them: normalised, 6 significant digits."""
    return [_significant(weight) for weight in normalised(weights)]


def _significant(value: float) -> float:
    """``value`` to 6 significant digits: a positive weight or share, however small, is never written as 0."""
    return float(f"{value:.6g}")
