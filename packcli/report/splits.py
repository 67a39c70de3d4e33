"""verify's cross-check of the ``split_pieces`` sidecars (:mod:`packcli.write.splits`; inline in the manifest for
outputs packed before sidecars) against the shards.

What must hold, and is checked: every ``[row, index, document, piece]`` names a document (piece) the shard holds,
and no piece is named twice; the tokens there are the piece pack cut as that piece of that document (its digest:
so the pieces are in order and contiguous in the source, and an export joins them back exactly); the pieces of
each split document (its number, within the shards of one partition) are numbered 0, 1, ... each once, at least
two of them; every piece but a document's last is exactly ``max_len``
tokens (splitting cuts there); the documents listed are ``totals.split_documents`` in number, and their pieces
beyond each document's first are the pieces the totals count beyond one per input document. ``first_supervised``
(the whole document's supervision at each piece's first token, for export's joins) is in every sidecar of an output
with labels or in none (packed before it), in none without labels, 0 or 1, and 0 for a document's first piece (a
document's first token is never supervised). An output packed before ``split_pieces`` existed lists none: then
nothing is checked here. A piece in a row whose ``cu_seqlens`` is
damaged, or in a shard that could not be read, is not resolved (verify reports that row or shard already), and its
document is left out of the length checks.

It also tells verify, batch by batch, the place of every document (``cu_seqlens`` segment) of the rows: a whole
document, or which piece of which split document and whether its last (:class:`Places`), for verify's BOS and EOS
check of each one. An output that does not record its pieces (none listed while ``totals.split_documents`` counts
some, or listed malformed) leaves every place unrecorded; one without split documents has only whole documents.
Only an output packed before ``split_pieces`` existed may list none of its split documents: a shard carrying the
``packcli.eos_id`` metadata, which pack writes only since, says its output was packed after, so a manifest whose
``split_pieces`` were deleted is refused, not verified under the looser counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packcli.errors import PackcliError
from packcli.format.sidecars import SplitPieces, lists_split_pieces, piece_digest, read_split_pieces

__all__ = ["UNRECORDED", "WHOLE", "Places", "SplitPieceCheck"]

LISTED_SINCE = "packcli.eos_id"  # shard metadata that pack writes only since it lists split_pieces
UNSEEN, RESOLVED, UNRESOLVED, ABSENT = 0, 1, 2, 3  # what became of an entry while its shard was read
WHOLE, UNRECORDED = -1, -2  # a place's piece number: a whole document; a document or piece the output does not place


@dataclass(frozen=True)
class Places:
    """Where each document (``cu_seqlens`` segment) of a batch stands in its input document, in document order."""

    piece: np.ndarray  # int64: its piece number in a split document, WHOLE or UNRECORDED
    last: np.ndarray  # bool: the last piece of its split document
    document: np.ndarray  # int64: the split document's number, where it is a piece


@dataclass
class _Kind:
    """One kind of problem: how many, and the first one's detail."""

    count: int = 0
    first: str = ""


@dataclass
class _Entries:
    """One shard's entries (rows of ``[row, index, document, piece]``) and what the shard holds there."""

    entries: np.ndarray  # int64, (k, 4)
    digests: np.ndarray | None  # int64, (k,): what pack cut there (None: an output listing its pieces inline)
    first_supervised: np.ndarray | None  # int64, (k,): 0 or 1 (None: not recorded)
    state: np.ndarray = field(init=False)  # UNSEEN / RESOLVED / UNRESOLVED / ABSENT per entry
    length: np.ndarray = field(init=False)  # the piece's tokens, where resolved
    last: np.ndarray = field(init=False)  # whether no entry names a later piece of its document

    def __post_init__(self) -> None:
        self.state = np.zeros(len(self.entries), dtype=np.int8)
        self.length = np.zeros(len(self.entries), dtype=np.int64)
        self.last = np.zeros(len(self.entries), dtype=bool)
        self.digest_differs = np.zeros(len(self.entries), dtype=bool)


class SplitPieceCheck:
    """Collects, shard by shard and batch by batch, the pieces the entries name; :meth:`problems` says what fails.

    Args:
        out: the output directory (its sidecars are read from there).
        manifest: the output's manifest (validated).
        labelled: whether the output's rows carry labels (then its sidecars record ``first_supervised``).
    """

    def __init__(self, out: Path, manifest: dict[str, Any], labelled: bool) -> None:
        self.out = out
        self.manifest = manifest
        self.labelled = labelled
        self.listed = any(lists_split_pieces(shard) for shard in manifest["shards"])
        self.malformed: list[str] = []  # why a shard's pieces cannot be read
        self.shards = [
            _Entries(listed.entries, listed.digests, listed.first_supervised)
            for listed in map(self._read, manifest["shards"])
        ]
        self.recorded = not self.malformed and (self.listed or manifest["totals"]["split_documents"] == 0)
        _mark_last_pieces([_partition(str(shard["file"])) for shard in manifest["shards"]], self.shards)
        self.read: set[int] = set()  # shards whose rows were all read
        self.packed_listing = False  # a shard says its output was packed by a pack that lists split_pieces

    def _read(self, shard: dict[str, Any]) -> SplitPieces:
        try:
            listed = read_split_pieces(self.out, shard)
        except PackcliError as exc:
            self.malformed.append(f"{Path(exc.path).name + ': ' if exc.path else ''}{exc.message}")
            listed = None
        return listed or SplitPieces(np.zeros((0, 4), dtype=np.int64), None, None)

    def shard_metadata(self, metadata: dict[str, str]) -> None:
        """A shard's schema metadata, as read."""
        self.packed_listing = self.packed_listing or LISTED_SINCE in metadata

    def observe(
        self,
        shard: int,
        first_row: int,
        bad_rows: np.ndarray,
        ids: np.ndarray,
        doc_row: np.ndarray,
        doc_start: np.ndarray,
        doc_length: np.ndarray,
    ) -> Places:
        """Resolve the entries naming rows of one batch: ``bad_rows`` (a bool per row) are the rows whose documents
        cannot be told; ``doc_row`` (ascending), ``doc_start`` (in ``ids``, the batch's tokens) and ``doc_length``
        the documents of the others. Returns the place of each of those documents."""
        places = Places(
            np.full(len(doc_row), WHOLE if self.recorded else UNRECORDED, dtype=np.int64),
            np.zeros(len(doc_row), dtype=bool),
            np.zeros(len(doc_row), dtype=np.int64),
        )
        held = self.shards[shard]
        rows = held.entries[:, 0] - first_row
        here = np.flatnonzero((rows >= 0) & (rows < len(bad_rows)))
        if not len(here):
            return places
        rows = rows[here]
        first_doc = np.searchsorted(doc_row, rows, side="left")
        count = np.searchsorted(doc_row, rows, side="right") - first_doc
        index = held.entries[here, 1]
        found = index < count
        held.state[here] = np.where(bad_rows[rows], UNRESOLVED, np.where(found, RESOLVED, ABSENT))
        resolved = here[held.state[here] == RESOLVED]
        document = (first_doc + index)[held.state[here] == RESOLVED]
        held.length[resolved] = doc_length[document]
        if held.digests is not None:
            for k, at in zip(resolved.tolist(), document.tolist()):
                tokens = ids[doc_start[at] : doc_start[at] + doc_length[at]]
                document_number, piece = (int(value) for value in held.entries[k, 2:4])
                held.digest_differs[k] = piece_digest(document_number, piece, tokens) != held.digests[k]
        if self.recorded:
            places.piece[document] = held.entries[resolved, 3]
            places.last[document] = held.last[resolved]
            places.document[document] = held.entries[resolved, 2]
        return places

    def shard_read(self, shard: int) -> None:
        """Every row of ``shard`` went through :meth:`observe`: an entry still unseen names a row it does not have."""
        self.read.add(shard)

    def problems(self) -> list[str]:
        """What the entries get wrong, one line per kind of problem (empty when they hold, or list nothing)."""
        if not self.listed:
            split = self.manifest["totals"]["split_documents"]
            if split and self.packed_listing:
                return [
                    f"manifest: split_pieces: none listed, yet totals.split_documents is {split} and the shards "
                    f"were written by a pack that lists them ({LISTED_SINCE} metadata): the manifest was edited"
                ]
            return []
        if self.malformed:
            return [f"split_pieces of {len(self.malformed)} shard(s) cannot be read (first: {self.malformed[0]})"]
        kinds: dict[str, _Kind] = {}

        def note(what: str, detail: str) -> None:
            kind = kinds.setdefault(what, _Kind(first=detail))
            kind.count += 1

        groups: dict[tuple[str, int], list[tuple[int, int, int]]] = {}  # -> (piece, shard, entry)
        for number, (shard, held) in enumerate(zip(self.manifest["shards"], self.shards)):
            name = str(shard["file"])
            partition = _partition(name)
            named: set[tuple[int, int]] = set()
            for k, (row, index, document, piece) in enumerate(held.entries.tolist()):
                where = f"{name} row {row} index {index}"
                if number in self.read and held.state[k] in (UNSEEN, ABSENT):
                    note("name a document (piece) that its shard does not hold", where)
                if (row, index) in named:
                    note("name a piece that an earlier entry names", where)
                elif held.digest_differs[k]:
                    note(
                        "whose tokens are not what pack cut as that piece of that document (its digest differs): "
                        "pieces out of order, or of another document",
                        f"{where}, piece {piece} of document {document}",
                    )
                if piece == 0 and held.first_supervised is not None and held.first_supervised[k]:
                    note(
                        "with first_supervised 1 at a document's first piece, whose first token is never supervised",
                        f"{where}, document {document}",
                    )
                named.add((row, index))
                groups.setdefault((partition, document), []).append((piece, number, k))
        max_len = int(self.manifest["max_len"])
        extra = 0
        for (partition, document), members in groups.items():
            members.sort()
            extra += len(members) - 1
            about = f"document {document}" + (f" of partition {partition!r}" if partition else "")
            numbers = [piece for piece, _, _ in members]
            if len(numbers) < 2 or numbers != list(range(len(numbers))):
                note("whose pieces are not numbered 0, 1, ... each once, two at least", f"{about}: {_shown(numbers)}")
                continue
            if any(self.shards[shard].state[k] != RESOLVED for _, shard, k in members):
                continue
            lengths = [int(self.shards[shard].length[k]) for _, shard, k in members]
            if any(length != max_len for length in lengths[:-1]):
                note(
                    f"with a piece before the last that is not max_len {max_len} tokens", f"{about}: {_shown(lengths)}"
                )
        lines = [f"split_pieces: {kind.count} {what} (first: {kind.first})" for what, kind in kinds.items()]
        return lines + self._first_supervised_problems() + self._against_totals(len(groups), extra)

    def _first_supervised_problems(self) -> list[str]:
        """``first_supervised`` in every sidecar of a labelled output or in none (packed before it); in none of an
        output without labels."""
        listing = [
            (str(shard["file"]), held.first_supervised is not None)
            for shard, held in zip(self.manifest["shards"], self.shards)
            if len(held.entries)
        ]
        recorded = [name for name, has in listing if has]
        missing = [name for name, has in listing if not has]
        if not self.labelled and recorded:
            return [
                f"split_pieces: first_supervised in the sidecars of {len(recorded)} shard(s) of an output without "
                f"labels (first: {recorded[0]})"
            ]
        if recorded and missing:
            return [
                f"split_pieces: first_supervised missing from the sidecars of {len(missing)} of {len(listing)} "
                f"shard(s) listing split pieces, the others record it (first: {missing[0]})"
            ]
        return []

    def _against_totals(self, documents: int, extra: int) -> list[str]:
        """The split documents listed, and their pieces beyond the first, against what the totals count."""
        totals = self.manifest["totals"]
        problems = []
        if documents != totals["split_documents"]:
            problems.append(
                f"manifest: split_pieces list {documents} split documents, totals.split_documents is "
                f"{totals['split_documents']}"
            )
        if "input_documents" in totals:
            counted = totals["documents"] - totals["input_documents"] + totals["dropped_documents"]
            if extra != counted:
                problems.append(
                    f"manifest: split_pieces list {extra} pieces beyond each split document's first, the totals count "
                    f"{counted} (documents - input_documents + dropped_documents)"
                )
        return problems


def _partition(name: str) -> str:
    """The partition a shard belongs to, from its file name (``part-00003-shard-00001.arrow``: ``part-00003-``)."""
    return name.rsplit("shard-", 1)[0]


def _mark_last_pieces(partitions: list[str], shards: list[_Entries]) -> None:
    """Mark each entry that names the highest piece of its document among the entries of its partition's shards."""
    counts = [len(held.entries) for held in shards]
    entries = np.concatenate([held.entries for held in shards]) if shards else np.zeros((0, 4), dtype=np.int64)
    numbered = {partition: k for k, partition in enumerate(dict.fromkeys(partitions))}
    partition = np.repeat(np.array([numbered[name] for name in partitions], dtype=np.int64), counts)
    order = np.lexsort((entries[:, 3], entries[:, 2], partition))  # by document, then piece
    document, part = entries[order, 2], partition[order]
    highest = np.ones(len(order), dtype=bool)  # the last of its document in that order
    highest[:-1] = (document[1:] != document[:-1]) | (part[1:] != part[:-1])
    last = np.zeros(len(order), dtype=bool)
    last[order[highest]] = True
    for held, marks in zip(shards, np.split(last, np.cumsum(counts)[:-1])):
        held.last = marks


def _shown(values: list[int]) -> str:
    """A list as a problem line shows it: at most a dozen values."""
    return str(values) if len(values) <= 12 else f"[{', '.join(map(str, values[:12]))}, ... ({len(values)} in all)]"
