"""How a record becomes a document: which fields are read, and how they turn into tokens (and, for fine-tuning,
a supervision mask that becomes the ``labels`` column).

Each encoder works in three steps so tokenization can run in a helper thread: ``prepare`` (this thread: drop and
count empty records, render templates), ``encode`` (the tokenizer, which releases the GIL), ``flatten`` (this
thread: one flat token array, per-document lengths, EOS/BOS added, and the mask).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from tokenizers import Tokenizer

from packcli.encode.chat import ChatML, JinjaTemplate, Segment, load_template
from packcli.encode.tokenizer import LoadedTokenizer, encode_texts, flatten, special_ids
from packcli.options import PackOptions
from packcli.read.fields import Field, ReadCounts

Flat = tuple[np.ndarray, np.ndarray, np.ndarray | None]  # tokens, lengths, supervision mask (or None)


class Encoder(Protocol):
    """Turns batches of records into documents."""

    fields: list[Field]
    supervised: bool  # whether documents carry a supervision mask (a labels column)
    convert: Callable[[list[Any]], Any] | None  # per-record conversion, run while reading (errors name the line)
    fingerprint: dict[str, str]  # what else, beyond options and tokenizer, decides the output

    def prepare(self, columns: list[list[Any]], counts: ReadCounts) -> Any:
        """This thread: turn a batch of records into what ``encode`` takes; count the records it skips."""
        ...

    def sizes(self, prepared: Any) -> list[int]:
        """Each prepared document's text size in characters: what encoding it costs, to balance batches."""
        ...

    def encode(self, prepared: Any) -> Any:
        """A helper thread: the tokenizer calls (they release the GIL)."""
        ...

    def flatten(self, encoded: Any) -> Flat:
        """This thread: flat tokens, per-document lengths (EOS/BOS added) and the supervision mask or None."""
        ...


class TextEncoder:
    """Pretraining text: one field, the whole text is a document, no mask."""

    supervised: bool = False
    convert: Callable[[list[Any]], Any] | None = None

    def __init__(self, options: PackOptions, tokenizer: LoadedTokenizer) -> None:
        self.fingerprint: dict[str, str] = {}
        self.fields = [Field(options.text_field)]
        self.tokenizer = tokenizer.tokenizer
        self.eos_id, self.bos_id = special_ids(tokenizer, options.eos, options.bos)

    def prepare(self, columns: list[list[Any]], counts: ReadCounts) -> list[str]:
        texts = [text for text in columns[0] if text]
        counts.empty_documents += len(columns[0]) - len(texts)
        return texts

    def sizes(self, texts: list[str]) -> list[int]:
        return [len(text) for text in texts]

    def encode(self, texts: list[str]) -> list[list[int]]:
        return encode_texts(self.tokenizer, texts)

    def flatten(self, ids: list[list[int]]) -> Flat:
        tokens, lengths = flatten(ids, self.eos_id, self.bos_id)
        return tokens, lengths, None


class SegmentEncoder:
    """Fine-tuning records as segments (prompt/response, or chat turns), each tokenized on its own, with a mask.

    A record with nothing to supervise (an empty response, a chat without an assistant turn) is counted as
    empty and skipped.
    """

    supervised: bool = True

    def __init__(self, options: PackOptions, tokenizer: LoadedTokenizer) -> None:
        self.loss_on_all = options.loss_on == "all"
        self.eos_id, self.bos_id = special_ids(tokenizer, options.eos, options.bos)
        self.content = tokenizer.tokenizer  # special-token strings in content stay text
        self.markup: Tokenizer | None = None  # chats only: template markup may name special tokens
        self.template: ChatML | JinjaTemplate | None = None
        self.convert: Callable[[list[Any]], Any] | None = None
        if options.messages_field is not None:
            self.fields = [Field(options.messages_field, "messages", "--messages-field")]
            names = tokenizer.tokenizer.id_to_token
            self.template = load_template(
                options.chat_template,
                options.tokenizer,
                (names(tokenizer.bos_id) or "") if tokenizer.bos_id is not None else "",
                (names(tokenizer.eos_id) or "") if tokenizer.eos_id is not None else "",
            )
            template = self.template
            self.markup = Tokenizer.from_str(tokenizer.tokenizer.to_str())
            self.markup.encode_special_tokens = False
            self.convert = lambda values: template.segments(values[0], self.loss_on_all)
            self.fingerprint = {"chat_template": template.sha256}
        else:
            assert options.prompt_field is not None and options.response_field is not None
            self.fields = [
                Field(options.prompt_field, flag="--prompt-field"),
                Field(options.response_field, flag="--response-field"),
            ]
            self.fingerprint = {}

    def prepare(self, columns: list[list[Any]], counts: ReadCounts) -> list[list[Segment]]:
        if self.template is not None:
            records = columns[0]  # already segments: converted while reading
        else:
            records = [
                [Segment(prompt, self.loss_on_all), Segment(response, True)]
                for prompt, response in zip(columns[0], columns[1])
            ]
        kept = [segments for segments in records if any(s.supervised and s.text for s in segments)]
        counts.empty_documents += len(records) - len(kept)
        return kept

    def sizes(self, records: list[list[Segment]]) -> list[int]:
        return [sum(len(segment.text) for segment in segments) for segments in records]

    def encode(self, records: list[list[Segment]]) -> tuple[list[list[Segment]], list[list[int]]]:
        segments = [segment for record in records for segment in record]
        ids: list[list[int]] = [[] for _ in segments]
        for tokenizer, markup in ((self.content, False), (self.markup, True)):
            if tokenizer is None:  # prompt/response records have no markup segments
                continue
            chosen = [k for k, segment in enumerate(segments) if segment.markup == markup and segment.text]
            for k, encoded in zip(chosen, encode_texts(tokenizer, [segments[k].text for k in chosen])):
                ids[k] = encoded
        return records, ids

    def flatten(self, encoded: tuple[list[list[Segment]], list[list[int]]]) -> Flat:
        records, ids = encoded
        segment_lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        supervised = np.fromiter((s.supervised for r in records for s in r), dtype=bool, count=len(ids))
        tokens = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(segment_lengths.sum()))
        mask = np.repeat(supervised, segment_lengths)
        per_record = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
        last_segment = np.cumsum(per_record) - 1
        lengths = np.add.reduceat(segment_lengths, last_segment - per_record + 1) if len(records) else per_record
        if self.eos_id is not None:  # EOS ends the document and is supervised when the last segment is
            ends = np.cumsum(lengths)
            tokens = np.insert(tokens, ends, self.eos_id)
            mask = np.insert(mask, ends, supervised[last_segment])
            lengths = lengths + 1
        if self.bos_id is not None:
            starts = np.cumsum(lengths) - lengths
            tokens = np.insert(tokens, starts, self.bos_id)
            mask = np.insert(mask, starts, False)
            lengths = lengths + 1
        return tokens, lengths, mask


def make_encoder(options: PackOptions, tokenizer: LoadedTokenizer) -> TextEncoder | SegmentEncoder:
    """The encoder for the options' record kind: text, prompt/response, or chat messages."""
    if options.messages_field is not None or options.prompt_field is not None:
        return SegmentEncoder(options, tokenizer)
    return TextEncoder(options, tokenizer)
