"""How a record becomes a document: which fields are read, and how they turn into tokens (and, for fine-tuning,
a supervision mask that becomes the ``labels`` column). Pre-tokenized records skip the tokenizer.

Each encoder works in three steps so tokenization can run in a helper thread: ``prepare`` (this thread: drop and
count empty records, render templates), ``encode`` (the backend, which releases the GIL, and the cross-check of a
sample against Hugging Face), ``flatten`` (this thread: one flat token array, per-document lengths, EOS/BOS added,
and the mask).

Invariant: every document that ``flatten`` returns has at least one token (and, with a mask, one supervised token).
A record that comes to nothing, empty before tokenization or after it (whitespace under a WordPiece tokenizer with
``--no-eos``), is counted in ``empty_documents`` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from packcli.encode.backends import Backend, Backends, HFBackend, open_backends
from packcli.encode.chat import ChatML, ChatReader, JinjaTemplate, Segment, counted_segments
from packcli.encode.crosscheck import CrossCheck, TokenizerMismatch
from packcli.encode.documents import Flat, add_specials, kept_records
from packcli.encode.template_notices import template_notices
from packcli.encode.templates import load_template
from packcli.encode.tokenizer import LoadedTokenizer, special_ids
from packcli.errors import BadRecordError, UsageError, option
from packcli.format.columns import IGNORE_INDEX
from packcli.format.schema import position_ids
from packcli.options import PackOptions
from packcli.read.fields import Field, ReadCounts
from packcli.util.arrays import exclusive_cumsum

__all__ = ["Encoder", "make_encoder"]


class Encoder(Protocol):
    """Turns batches of records into documents."""

    fields: list[Field]
    supervised: bool  # whether documents carry a supervision mask (a labels column)
    convert: Callable[[list[Any]], Any] | None  # per-record conversion, run while reading (errors name the line)
    eos_id: int | None  # the EOS id actually appended (None: none)
    bos_id: int | None
    template_sha256: str | None  # chats: the chat template actually used
    backend: dict[str, str]  # the tokenizer backend that encodes (see Backends.describe); {} when none runs

    def prepare(self, columns: list[list[Any]], counts: ReadCounts) -> tuple[Any, np.ndarray]:
        """This thread: turn a batch of records into what ``encode`` takes, and which records it kept (a bool per
        record, :func:`~packcli.encode.documents.kept_records`); count the records it skips."""
        ...

    def sizes(self, prepared: Any) -> list[int]:
        """Each prepared document's text size in characters: what encoding it costs, to balance batches."""
        ...

    def encode(self, prepared: Any) -> Any:
        """A helper thread: the tokenizer calls (they release the GIL)."""
        ...

    def flatten(self, encoded: Any, counts: ReadCounts) -> Flat:
        """This thread: flat tokens, per-document lengths (EOS/BOS added) and the supervision mask or None, one
        document per prepared record (the caller leaves out and counts those that come to nothing:
        :func:`~packcli.encode.documents.without_empty`)."""
        ...


class TextEncoder:
    """Pretraining text: one field, the whole text is a document, no mask."""

    supervised: bool = False
    convert: Callable[[list[Any]], Any] | None = None

    template_sha256: str | None = None

    def __init__(self, options: PackOptions, tokenizer: LoadedTokenizer, backends: Backends) -> None:
        self.fields = [Field(options.text_field)]
        self.eos_id, self.bos_id = special_ids(tokenizer, options.eos, options.bos)
        self.text = backends.text
        self.backend = backends.describe()
        self.check = _checked(backends.text, backends.reference_text, backends.name, options.seed)

    def prepare(self, columns: list[list[Any]], counts: ReadCounts) -> tuple[list[str], np.ndarray]:
        return kept_records(columns[0], [bool(text) for text in columns[0]], counts)

    def sizes(self, texts: list[str]) -> list[int]:
        return [len(text) for text in texts]

    def encode(self, texts: list[str]) -> Any:
        encoded = self.text.encode(texts)
        if self.check is not None:
            try:
                self.check(texts, encoded)
            except TokenizerMismatch as exc:
                exc.document = texts[exc.index]
                raise
        return encoded

    def flatten(self, encoded: Any, counts: ReadCounts) -> Flat:
        # The ids are taken here, not in encode: the helper thread is then free to encode the next batch at once.
        tokens, lengths = self.text.ids(encoded)
        return add_specials(tokens, lengths, None, None, self.eos_id, self.bos_id)


Check = Callable[[list[str], Any], None]


def _checked(backend: Backend, reference: HFBackend | None, name: str, seed: int) -> Check | None:
    """The cross-check of ``backend`` against ``reference`` (None when the backend is Hugging Face itself)."""
    if reference is None:
        return None
    check = CrossCheck(name, seed)
    return lambda texts, encoded: check.verify(texts, backend, encoded, reference)


class SegmentEncoder:
    """Fine-tuning records as segments (prompt/response, or chat turns), each tokenized on its own, with a mask.

    A record with nothing to supervise (an empty response, a chat without an assistant turn) is counted as
    empty and skipped.
    """

    supervised: bool = True

    def __init__(
        self,
        options: PackOptions,
        tokenizer: LoadedTokenizer,
        backends: Backends,
        warn: Callable[[str], None],
        template_source: str | None = None,
    ) -> None:
        self.loss_on_all = options.loss_on == "all"
        self.eos_id, self.bos_id = special_ids(tokenizer, options.eos, options.bos)
        self.backend = backends.describe()
        # content: special-token strings stay text; markup (chats only): template markup may name special tokens
        self.backends = [(False, backends.text, backends.reference_text)]
        if backends.markup is not None:
            self.backends.append((True, backends.markup, backends.reference_markup))
        self.checks = [_checked(coder, reference, backends.name, options.seed) for _, coder, reference in self.backends]
        self.template: ChatML | JinjaTemplate | None = None
        self.convert: Callable[[list[Any]], Any] | None = None
        self.template_sha256: str | None = None
        if options.messages_field is not None:
            self.fields = [Field(options.messages_field, "messages", option("messages_field"))]
            if options.tools_field:  # a record without it renders as one without tools
                self.fields.append(Field(options.tools_field, "tools", option("tools_field"), optional=True))
            self.template = load_template(options.chat_template, tokenizer, warn, template_source)
            self.template_sha256 = self.template.sha256
            reader = ChatReader.of(self.template, self.loss_on_all, tokenizer, self.eos_id)
            for notice in template_notices(self.template, self.loss_on_all, reader.eos_token):
                warn(notice)
            self.convert = reader
        else:
            assert options.prompt_field is not None and options.response_field is not None
            self.fields = [
                Field(options.prompt_field, flag=option("prompt_field")),
                Field(options.response_field, flag=option("response_field")),
            ]

    def prepare(self, columns: list[list[Any]], counts: ReadCounts) -> tuple[list[list[Segment]], np.ndarray]:
        if self.template is not None:
            records = counted_segments(columns[0], counts)  # converted while reading
        else:
            records = [
                [Segment(prompt, self.loss_on_all), Segment(response, True)]
                for prompt, response in zip(columns[0], columns[1])
            ]
        return kept_records(records, [any(s.supervised and s.text for s in segments) for segments in records], counts)

    def sizes(self, records: list[list[Segment]]) -> list[int]:
        return [sum(len(segment.text) for segment in segments) for segments in records]

    def encode(self, records: list[list[Segment]]) -> tuple[list[list[Segment]], list[tuple[list[int], Backend, Any]]]:
        segments = [segment for record in records for segment in record]
        encoded = []
        for (markup, backend, _), check in zip(self.backends, self.checks):
            chosen = [k for k, segment in enumerate(segments) if segment.markup == markup and segment.text]
            texts = [segments[k].text for k in chosen]
            result = backend.encode(texts)
            if check is not None:
                try:
                    check(texts, result)
                except TokenizerMismatch as exc:
                    raise self._located(exc, records, chosen[exc.index]) from None
            encoded.append((chosen, backend, result))
        return records, encoded

    def _located(self, mismatch: TokenizerMismatch, records: list[list[Segment]], segment: int) -> TokenizerMismatch:
        """``mismatch`` in the batch's ``segment`` (counted over all records' segments), with its record as the
        document and its position counted from the record's first token (Hugging Face's count of the segments
        before it)."""
        first = 0
        for record in records:
            if segment < first + len(record):
                break
            first += len(record)
        references = {markup: reference for markup, _, reference in self.backends if reference is not None}
        tokens_before = 0
        for earlier in record[: segment - first]:
            if earlier.text:
                tokens_before += len(references[earlier.markup].id_lists([earlier.text])[0])
        located = mismatch.counted_from(tokens_before)
        located.document = record
        return located

    def flatten(
        self, encoded: tuple[list[list[Segment]], list[tuple[list[int], Backend, Any]]], counts: ReadCounts
    ) -> Flat:
        records, parts = encoded
        supervised = np.fromiter((s.supervised for r in records for s in r), dtype=bool)
        ids = [(chosen, backend.ids(result)) for chosen, backend, result in parts]
        tokens, segment_lengths = _in_segment_order(len(supervised), ids)
        mask = np.repeat(supervised, segment_lengths)
        per_record = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
        last_segment = np.cumsum(per_record) - 1
        lengths = np.add.reduceat(segment_lengths, last_segment - per_record + 1) if len(records) else per_record
        rendered = self.template is not None  # a chat template may render EOS and BOS itself
        return add_specials(tokens, lengths, mask, supervised[last_segment], self.eos_id, self.bos_id, rendered)


def _in_segment_order(
    count: int, parts: list[tuple[list[int], tuple[np.ndarray, np.ndarray]]]
) -> tuple[np.ndarray, np.ndarray]:
    """The tokens of ``count`` segments in segment order, from parts that each encoded some of them (``chosen``:
    which, in order; a segment in no part has no tokens), and each segment's token count.

    Example: parts ([1], ids [7, 8]) and ([0, 2], ids [5] and [9]) give tokens [5, 7, 8, 9], lengths [1, 2, 1].
    """
    lengths = np.zeros(count, dtype=np.int64)
    source_starts = np.zeros(count, dtype=np.int64)
    offset = 0
    for chosen, (_, part_lengths) in parts:
        lengths[chosen] = part_lengths
        source_starts[chosen] = offset + exclusive_cumsum(part_lengths)[:-1]
        offset += int(part_lengths.sum())
    source = np.concatenate([tokens for _, (tokens, _) in parts]) if parts else np.zeros(0, dtype=np.int32)
    index = np.repeat(source_starts, lengths) + position_ids(lengths)  # every token of each segment, in order
    return source[index], lengths


class IdsEncoder:
    """Pre-tokenized records: token ids packed as given, no tokenizer run; with ``--labels-field``, labels (-100
    where no loss is taken) become the supervision mask.

    EOS is appended only with ``--eos-id`` or, when a tokenizer is given, its EOS (unless ``--no-eos``). Ids are
    checked while reading, so a bad one names its file and line: in [0, 2^31), below the tokenizer's vocabulary
    size when there is one; a label is -100 or the id it sits on. A record without ids (or, with labels, without
    a supervised token) is counted as empty and skipped.
    """

    template_sha256: str | None = None
    backend: dict[str, str] = {}  # noqa: RUF012 (never changed): no tokenizer runs

    def __init__(self, options: PackOptions, tokenizer: LoadedTokenizer | None) -> None:
        assert options.ids_field is not None
        self.fields = [Field(options.ids_field, "ids", option("ids_field"))]
        if options.labels_field is not None:
            self.fields.append(Field(options.labels_field, "labels", option("labels_field")))
        self.supervised = options.labels_field is not None
        self.vocab_size = tokenizer.vocab_size if tokenizer is not None else None
        self.tokenizer_name = tokenizer.name if tokenizer is not None else None
        if tokenizer is None:
            if options.bos:
                raise UsageError(
                    f"{option('bos', True)} with {option('ids_field')} needs {option('tokenizer')} (to know the BOS id)"
                )
            self.eos_id, self.bos_id = options.eos_id, None
        else:
            self.eos_id, self.bos_id = special_ids(tokenizer, options.eos and options.eos_id is None, options.bos)
            self.eos_id = options.eos_id if options.eos_id is not None else self.eos_id
        if self.eos_id is not None and self.vocab_size is not None and self.eos_id >= self.vocab_size:
            raise UsageError(f"{option('eos_id', self.eos_id)} is not below the vocabulary size {self.vocab_size}")
        self.convert: Callable[[list[Any]], Any] | None = self._check

    def _check(self, values: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray | None]:
        """One record's ids (and supervision mask), checked against the vocabulary and the labels."""
        ids = values[0]
        if self.vocab_size is not None and len(ids) and int(ids.max()) >= self.vocab_size:
            position = int(np.argmax(ids >= self.vocab_size))
            raise BadRecordError(
                f"field {self.fields[0].name!r} holds {int(ids[position])} at position {position}: not below the "
                f"vocabulary size {self.vocab_size} of tokenizer {self.tokenizer_name}"
            )
        if not self.supervised:
            return ids, None
        labels = values[1]
        name = self.fields[1].name
        if len(labels) != len(ids):
            raise BadRecordError(f"field {name!r} holds {len(labels)} labels for {len(ids)} ids")
        mask = labels != IGNORE_INDEX
        wrong = mask & (labels != ids)
        if wrong.any():
            position = int(np.argmax(wrong))
            raise BadRecordError(
                f"field {name!r} holds {int(labels[position])} at position {position}: a label is -100 or the id "
                f"it sits on ({int(ids[position])})"
            )
        return ids, mask

    def prepare(
        self, columns: list[list[Any]], counts: ReadCounts
    ) -> tuple[list[tuple[np.ndarray, np.ndarray | None]], np.ndarray]:
        records = columns[0]
        keep = [bool(len(ids)) and (mask is None or bool(mask.any())) for ids, mask in records]
        return kept_records(records, keep, counts)

    def sizes(self, records: list[tuple[np.ndarray, np.ndarray | None]]) -> list[int]:
        return [1] * len(records)  # nothing to tokenize: any batch is balanced

    def encode(self, records: list[tuple[np.ndarray, np.ndarray | None]]) -> Any:
        return records  # nothing to tokenize

    def flatten(self, records: list[tuple[np.ndarray, np.ndarray | None]], counts: ReadCounts) -> Flat:
        """(``prepare`` left out the records without ids, or without a supervised label: nothing here is empty.)"""
        lengths = np.fromiter((len(ids) for ids, _ in records), dtype=np.int64, count=len(records))
        tokens = np.concatenate([ids for ids, _ in records]) if records else np.zeros(0, dtype=np.int32)
        if not self.supervised:
            return add_specials(tokens, lengths, None, None, self.eos_id, self.bos_id)
        mask = np.concatenate([mask for _, mask in records]) if records else np.zeros(0, dtype=bool)
        last = mask[np.cumsum(lengths) - 1] if len(records) else mask
        return add_specials(tokens, lengths, mask, last, self.eos_id, self.bos_id)


def make_encoder(
    options: PackOptions,
    tokenizer: LoadedTokenizer | None,
    warn: Callable[[str], None] = lambda message: None,
    template_source: str | None = None,
    built: bool = False,
) -> TextEncoder | SegmentEncoder | IdsEncoder:
    """The encoder for the options' record kind: text, prompt/response, chat messages, or token ids (the only
    kind that needs no tokenizer). ``template_source``: the ``--chat-template`` file's text, read by the driver.
    ``built``: what encoding builds or imports on first use is built now (a worker about to fork)."""
    if options.ids_field is not None:
        return IdsEncoder(options, tokenizer)
    assert tokenizer is not None
    markup = options.messages_field is not None
    backends = open_backends(tokenizer, options.tokenizer_backend, markup)
    if built:
        backends.build_all()
    if options.fine_tuning:
        return SegmentEncoder(options, tokenizer, backends, warn, template_source)
    return TextEncoder(options, tokenizer, backends)
