"""Where pack puts BOS and EOS, held document by document (``cu_seqlens`` segment by segment) for verify.

Pack adds BOS and EOS to each input document (``--bos``; EOS unless ``--no-eos``), then cuts a document longer
than ``max_len`` into pieces (``--overflow split``) or truncates it. So, with the document's place known (from the
manifest's ``split_pieces``, :mod:`packcli.report.splits`):

- with BOS prepended, a whole document and a first piece start with BOS; a later piece starts mid-document, so not
  with BOS (unless it is the appended EOS alone, a last piece of one token, and BOS and EOS are one id);
- with EOS appended, a whole document and a last piece end with EOS (but a truncated document, max_len long); a
  first or middle piece ends mid-document, so not with EOS (unless it is the BOS alone: max_len 1, one id).

"Not with" holds only where a document's own tokens never are those ids: text, whose special-token strings are
encoded as text. Pre-tokenized ids, chat markup, an EOS named by ``--eos-token`` (possibly an ordinary token) and a
BOS or EOS that is no special token (``tokenizer.specials_in_text``: a tokenizer_config.json naming an ordinary one)
may hold them anywhere, so there only the "starts with" and "ends with" halves are checked. A document whose place the
output does not record (packed before ``split_pieces``) may be any piece: it ends with EOS unless max_len long, and
the ones that lack BOS, or lack EOS being max_len long, are only counted, for the bounds the totals give.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packcli.report.splits import UNRECORDED, WHOLE, Places

__all__ = ["Misplaced", "SpecialsRule", "misplaced_specials"]

CONTENT_MAY_HOLD_SPECIALS = ("ids_field", "messages_field", "eos_token")  # options under which it may


@dataclass(frozen=True)
class SpecialsRule:
    """What the manifest says pack added, and how it cut documents."""

    bos_id: int | None  # the BOS id every document starts with (``--bos``), if one was prepended
    eos_id: int | None  # the EOS id appended to every document, if one was
    max_len: int
    truncated: bool  # documents were cut to max_len (``--overflow truncate``), losing their EOS
    in_content: bool  # a document's own tokens may be the BOS or EOS id

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> SpecialsRule:
        tokenizer, options = manifest["tokenizer"], manifest["options"]
        return cls(
            bos_id=tokenizer.get("bos_id") if options.get("bos") is True else None,
            eos_id=tokenizer.get("eos_id") if options.get("eos") is True else None,
            max_len=manifest["max_len"],
            truncated=manifest["totals"]["truncated_tokens"] > 0,
            in_content=tokenizer.get("specials_in_text") is True
            or any(options.get(key) is not None for key in CONTENT_MAY_HOLD_SPECIALS),
        )


@dataclass(frozen=True)
class Misplaced:
    """Documents (a bool per document) whose first or last token contradicts the rule, and what the rule says."""

    bad: np.ndarray
    what: str
    end: str  # "first" or "last": the token the problem is about


@dataclass
class Verdict:
    """The documents of one batch held to the rule."""

    misplaced: list[Misplaced] = field(default_factory=list)
    unmarked_starts: int = 0  # documents without BOS whose place is not recorded
    cut: int = 0  # max_len-long documents without EOS whose place allows it (truncated, or not recorded)


def misplaced_specials(
    rule: SpecialsRule, places: Places, first: np.ndarray, last: np.ndarray, length: np.ndarray
) -> Verdict:
    """Hold documents to the rule: ``first`` and ``last`` are their first and last tokens, ``length`` their token
    counts, ``places`` where each stands in its input document."""
    verdict = Verdict()
    piece, last_piece = places.piece, places.last
    whole, unrecorded = piece == WHOLE, piece == UNRECORDED
    exact = not rule.in_content
    same_id = rule.bos_id is not None and rule.bos_id == rule.eos_id
    if rule.bos_id is not None:
        bos = first == rule.bos_id
        verdict.misplaced.append(
            Misplaced(
                ~bos & (whole | (piece == 0)), f"document(s) that do not start with the BOS id {rule.bos_id}", "first"
            )
        )
        if exact:
            lone_eos = same_id & last_piece & (length == 1)
            verdict.misplaced.append(
                Misplaced(
                    bos & (piece > 0) & ~lone_eos,
                    f"later piece(s) of split documents that start with the BOS id {rule.bos_id}, which pack puts "
                    "before a document's first token only",
                    "first",
                )
            )
        verdict.unmarked_starts = int(np.count_nonzero(~bos & unrecorded))
    if rule.eos_id is None:
        return verdict
    eos = last == rule.eos_id
    may_be_cut = (length == rule.max_len) & (unrecorded | (whole & rule.truncated))
    verdict.misplaced.append(
        Misplaced(
            ~eos & ~may_be_cut & (whole | last_piece | unrecorded),
            f"document(s) that do not end with the EOS id {rule.eos_id}",
            "last",
        )
    )
    if exact:
        lone_bos = same_id & (piece == 0) & (rule.max_len == 1)
        verdict.misplaced.append(
            Misplaced(
                eos & (piece >= 0) & ~last_piece & ~lone_bos,
                f"piece(s) before the last of split documents that end with the EOS id {rule.eos_id}, which pack "
                "appends after a document's last token only",
                "last",
            )
        )
    verdict.cut = int(np.count_nonzero(~eos & may_be_cut))
    return verdict
