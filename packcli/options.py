"""The whole option set of ``packcli pack``, frozen: it goes into the manifest and, in part, the fingerprint."""

from __future__ import annotations

import dataclasses
import numbers
import os
import reprlib
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass
from enum import Enum
from typing import Any

from packcli.errors import UsageError, option
from packcli.format.columns import INT32_MAX
from packcli.option_text import format_weights, parse_count, parse_size, parse_weights, read_weight

__all__ = ["DEFAULT_MAX_LEN", "Overflow", "PackOptions"]

DEFAULT_MAX_LEN = 4096
DEFAULT_SHARD_SIZE = 512 * 2**20
DEFAULT_TOOLS_FIELD = "tools"
ENGINES = ("local", "ray")
TOKENIZER_BACKENDS = ("auto", "hf")  # the backend never changes a token (see packcli.encode.backends)
# Options added after format 1 whose default writes the bytes written before they existed: left out of the manifest
# and the fingerprint at that default, so an output packed before them is still up to date.
_LATER_DEFAULTS = {"position_ids": True}


class Overflow(Enum):
    """What happens to a document longer than ``max_len``."""

    split = "split"
    truncate = "truncate"
    drop = "drop"


@dataclass(frozen=True)
class PackOptions:
    """Options of one ``pack`` run; field names match the CLI flags (``max_len`` is ``--max-len``)."""

    max_len: int = DEFAULT_MAX_LEN
    tokenizer: str | None = None
    strategy: str = "bfd"
    text_field: str = "text"
    overflow: Overflow | None = None  # None: split for text, drop for fine-tuning records
    prompt_field: str | None = None
    response_field: str | None = None
    messages_field: str | None = None
    chat_template: str | None = None
    tools_field: str = (
        DEFAULT_TOOLS_FIELD  # chats: the field of a record's tool definitions, passed to the template ("": none)
    )
    loss_on: str = "assistant"
    shard_size: int = DEFAULT_SHARD_SIZE
    workers: int | None = None  # tokenizer threads; with partitions, worker processes (or Ray actors)
    seed: int = 0
    window: int | None = None
    eos: bool = True
    bos: bool = False
    eos_token: str | None = None
    skip_bad_records: bool = False
    ids_field: str | None = None  # pre-tokenized records: token ids packed as given, no tokenizer run
    labels_field: str | None = None  # pre-tokenized fine-tuning: labels with -100 where no loss is taken
    eos_id: int | None = None  # pre-tokenized: the EOS id to append
    weights: tuple[float, ...] | None = None  # mixing: one weight per input
    target_tokens: int | None = None  # mixing: the output's token budget
    shuffle: bool = True  # rows in a seeded random order (False: packing order)
    partitions: int | None = None  # a partitioned run: this many partitions (see packcli.run.plan)
    partition_size: int | None = None  # or as many partitions as it takes at about this many input bytes each
    engine: str = "local"  # what runs the partitions: "local" (a process pool) or "ray"
    ray_address: str | None = None
    tokenizer_backend: str = "auto"  # "auto": the fastest that reproduces Hugging Face exactly; "hf": Hugging Face
    position_ids: bool = True  # False (--no-position-ids): the column left out, readers rebuild it from cu_seqlens

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> PackOptions:
        """The options of a front end's values, by field name: the command line's flags and ``packcli.pack()``'s
        keyword arguments alike. Sizes (``shard_size``, ``partition_size``: "512MiB"), the token count
        (``target_tokens``: "3M") and the weights ("0.7,0.3") may be text, parsed here; any other value must be of
        its field's plain type (numpy's integers and booleans are taken as plain ones; the weights as a list of
        numbers), and None only where the field gives None a meaning (``tokenizer=None``: the bundled GPT-2).

        Raises:
            UsageError: an unknown option, text that does not parse, a value of another type, or options that do
                not go together; each option named as the caller writes it (:func:`packcli.errors.option`).
        """
        unknown = sorted(set(values) - _FIELD_TYPES.keys())
        if unknown:
            known = ", ".join(sorted(_FIELD_TYPES))
            raise UsageError(f"unknown pack option(s) {', '.join(unknown)}; known: {known}")
        parsed = {}
        for name, value in values.items():
            text = _TEXT_PARSERS.get(name)
            parsed[name] = text[0](value, name) if text is not None and isinstance(value, str) else _plain(name, value)
        return cls(**parsed)

    @property
    def overflow_policy(self) -> Overflow:
        """The overflow policy, resolved (``overflow`` is None only before initialisation)."""
        return Overflow(self.overflow)

    @property
    def partitioned(self) -> bool:
        """The run is cut into partitions (``--partitions`` or ``--partition-size``)."""
        return self.partitions is not None or self.partition_size is not None

    def in_one_process(self) -> PackOptions:
        """These options for a run whose input only this process can read (standard input, a dataset, spooled to a
        local temporary file): ``partitions=1`` on the local engine is the plain run. Any other partitioned run is
        left as it is, for the caller to refuse."""
        if self.partitions == 1 and self.partition_size is None and self.engine == "local":
            return dataclasses.replace(self, partitions=None)
        return self

    @property
    def fine_tuning(self) -> bool:
        """Records are prompt/response pairs, chats or labelled token ids: documents carry labels."""
        return self.prompt_field is not None or self.messages_field is not None or self.labels_field is not None

    @property
    def mixing(self) -> bool:
        """Sources are mixed by weight or to a token budget (see :mod:`packcli.packing.mixing`)."""
        return self.weights is not None or self.target_tokens is not None

    def __post_init__(self) -> None:
        self._check_pretokenized()
        self._check_eos_token()
        self._check_mixing()
        if (self.prompt_field is None) != (self.response_field is None):
            raise UsageError(f"{option('prompt_field')} and {option('response_field')} go together")
        if self.messages_field is not None and self.prompt_field is not None:
            raise UsageError(
                f"use either {option('messages_field')} or {option('prompt_field')}/{option('response_field')}, "
                "not both"
            )
        if self.chat_template is not None and self.messages_field is None:
            raise UsageError(f"{option('chat_template')} needs {option('messages_field')}")
        if self.tools_field != DEFAULT_TOOLS_FIELD and self.messages_field is None:
            raise UsageError(f"{option('tools_field')} needs {option('messages_field')}")
        if self.loss_on not in ("assistant", "all"):
            raise UsageError(f"{option('loss_on')} must be 'assistant' or 'all', got {self.loss_on!r}")
        if self.loss_on != "assistant" and not self.fine_tuning and self.ids_field is None:
            raise UsageError(f"{option('loss_on')} needs {option('prompt_field')} or {option('messages_field')}")
        self._check_distinct_fields()
        if self.overflow is None:  # a conversation is not cut in pieces unless asked: drop and count it
            object.__setattr__(self, "overflow", Overflow.drop if self.fine_tuning else Overflow.split)
        if not isinstance(self.overflow, Overflow):  # library callers may pass the policy's name
            choices = ", ".join(policy.value for policy in Overflow)
            if self.overflow not in {policy.value for policy in Overflow}:
                raise UsageError(f"unknown overflow policy {self.overflow!r}; choose one of {choices}")
            object.__setattr__(self, "overflow", Overflow(self.overflow))
        if self.max_len < 1:
            raise UsageError(f"{option('max_len')} must be at least 1, got {self.max_len}")
        if self.max_len > INT32_MAX:
            raise UsageError(
                f"{option('max_len')} must fit the int32 columns (at most {INT32_MAX:,}), got {self.max_len:,}"
            )
        if self.shard_size < 1:
            raise UsageError(f"{option('shard_size')} must be positive, got {self.shard_size}")
        if self.window is not None and self.window < 1:
            raise UsageError(f"{option('window')} must be at least 1, got {self.window}")
        if self.workers is not None and self.workers < 1:
            raise UsageError(f"{option('workers')} must be at least 1, got {self.workers}")
        if self.seed < 0:
            raise UsageError(f"{option('seed')} must be a non-negative integer, got {self.seed}")
        if self.tokenizer_backend not in TOKENIZER_BACKENDS:
            choices = ", ".join(TOKENIZER_BACKENDS)
            raise UsageError(
                f"unknown {option('tokenizer_backend')} {self.tokenizer_backend!r}; choose one of {choices}"
            )
        self._check_partitioning()

    def _check_pretokenized(self) -> None:
        if self.ids_field is None:
            for value, flag in ((self.labels_field, option("labels_field")), (self.eos_id, option("eos_id"))):
                if value is not None:
                    raise UsageError(f"{flag} is for pre-tokenized records: it needs {option('ids_field')}")
            return
        for value, flag in (
            (self.prompt_field, option("prompt_field")),
            (self.response_field, option("response_field")),
            (self.messages_field, option("messages_field")),
            (self.chat_template, option("chat_template")),
        ):
            if value is not None:
                raise UsageError(
                    f"{flag} does not combine with {option('ids_field')}: pre-tokenized records carry their "
                    f"supervision in {option('labels_field')} (a list of ints, -100 where no loss is taken)"
                )
        if self.loss_on != "assistant":
            raise UsageError(
                f"{option('loss_on')} is for chat records; pre-tokenized records take loss where "
                f"{option('labels_field')} says"
            )
        if self.eos_id is not None:
            if not self.eos:
                raise UsageError(
                    f"{option('eos_id')} and {option('eos', False)} contradict each other; pass one of them"
                )
            if not 0 <= self.eos_id <= INT32_MAX:
                raise UsageError(f"{option('eos_id')} must be in [0, 2^31), got {self.eos_id}")

    def _check_distinct_fields(self) -> None:
        """One field read as two parts of a record (prompt and response; messages and tools) doubles its text or
        passes the chat as its own tool definitions."""
        for first, second in (("prompt_field", "response_field"), ("tools_field", "messages_field")):
            value = getattr(self, first)
            if value is not None and value == getattr(self, second):
                by_default = first == "tools_field" and value == DEFAULT_TOOLS_FIELD  # the user may not have given it
                given = f"{option(first)} (by default {value!r})" if by_default else option(first)
                way_out = f": pass {option(first)} '' for no tool definitions, or another field" if by_default else ""
                raise UsageError(f"{given} and {option(second)} name the same field {value!r}{way_out}")

    def _check_eos_token(self) -> None:
        """``--eos-token`` names a token the run appends, or one a chat template renders (``eos_token``): an empty
        one, or one no document gets, would change the fingerprint alone."""
        if self.eos_token is None:
            return
        if not self.eos_token:
            raise UsageError(f"{option('eos_token')} must name a token, got ''")
        if not self.eos and self.messages_field is None:
            raise UsageError(
                f"{option('eos_token')} and {option('eos', False)} contradict each other; pass one of them"
            )

    def _check_mixing(self) -> None:
        if self.weights is not None:
            weights = tuple(read_weight(weight, reprlib.repr(weight)) for weight in self.weights)
            object.__setattr__(self, "weights", weights)
            if not weights:
                raise UsageError(f"{option('weights')} takes one weight per input, got none")
            if any(weight < 0 for weight in weights):
                raise UsageError(f"{option('weights')} must not be negative, got {format_weights(weights)}")
            if not any(weights):
                raise UsageError(f"{option('weights')} are all zero: give at least one input a positive weight")
        if self.target_tokens is not None and self.target_tokens < 1:
            raise UsageError(f"{option('target_tokens')} must be at least 1, got {self.target_tokens}")

    def _check_partitioning(self) -> None:
        if self.partitions is not None and self.partitions < 1:
            raise UsageError(f"{option('partitions')} must be at least 1, got {self.partitions}")
        if self.partition_size is not None and self.partition_size < 1:
            raise UsageError(f"{option('partition_size')} must be positive, got {self.partition_size}")
        if self.partitions is not None and self.partition_size is not None:
            raise UsageError(f"use either {option('partitions')} or {option('partition_size')}, not both")
        if self.engine not in ENGINES:
            raise UsageError(f"unknown engine {self.engine!r}; choose one of {', '.join(ENGINES)}")
        if self.engine != "local" and not self.partitioned:
            raise UsageError(
                f"{option('engine')} {self.engine} runs partitions: add {option('partitions')} P or "
                f"{option('partition_size')} SIZE"
            )
        if self.ray_address is not None and self.engine != "ray":
            raise UsageError(f"{option('ray_address')} needs {option('engine')} ray")
        if self.partitioned and self.mixing:
            raise UsageError(
                f"{option('weights')} and {option('target_tokens')} do not combine with partitions yet: mixing draws "
                "documents from the whole corpus; pack the mixture in one process"
            )

    def to_json(self) -> dict[str, Any]:
        """All options as plain JSON values, for the manifest."""
        out = dataclasses.asdict(self)
        out["overflow"] = Overflow(self.overflow).value
        out["weights"] = None if self.weights is None else list(self.weights)
        return out

    def output_relevant(self) -> dict[str, Any]:
        """The options that change the output bytes: these enter the fingerprint and the manifest. Not the
        scheduling (``workers``, ``engine``, ``ray_address``), not the tokenizer backend (the tokens are the same),
        and not how the partition count was asked for: a partitioned run's plan hash stands for its partitions.
        ``tools_field`` only for chats, at its default too: a chat packed before it may hold tools now rendered."""
        out = self.to_json()
        for name in ("workers", "engine", "ray_address", "partitions", "partition_size", "tokenizer_backend"):
            del out[name]
        for name, default in _LATER_DEFAULTS.items():
            if out[name] == default:
                del out[name]
        if self.messages_field is None:  # only chats read tools: any other output is as it was before the option
            del out["tools_field"]
        return out


# The options that may be given as text (the command line's, or "512MiB" in Python): their parsers, and an example.
_TEXT_PARSERS: dict[str, tuple[Callable[[str, str], Any], str]] = {
    "shard_size": (lambda text, name: parse_size(text), "512MiB"),
    "partition_size": (lambda text, name: parse_size(text), "512MiB"),
    "target_tokens": (parse_count, "3M"),
    "weights": (parse_weights, "0.7,0.3"),
}
PATH_OPTIONS = ("tokenizer", "chat_template")  # files: a Path is taken too
_TYPE_WORDS = {bool: "True or False", int: "a whole number", str: "a string", tuple: "a list of numbers"}
# The plain type of each field (None: __post_init__ checks it), from its annotation: "int", "str | None",
# "tuple[float, ...] | None"; and the fields that take None ("... | None").
_FIELD_TYPES: dict[str, type | None] = {
    field.name: next(
        (kind for kind in _TYPE_WORDS if str(field.type).removesuffix(" | None").split("[")[0] == kind.__name__), None
    )
    for field in dataclasses.fields(PackOptions)
}
_OPTIONAL = frozenset(field.name for field in dataclasses.fields(PackOptions) if str(field.type).endswith(" | None"))


def _plain(name: str, value: Any) -> Any:
    """An option's value as the plain Python type its field holds (numpy's integers and booleans too).

    Raises:
        UsageError: a value of another type (``"128"`` or ``128.5`` for ``max_len``, None for ``eos``, a bool or a
            string among the weights), naming the option.
    """
    kind = _FIELD_TYPES[name]
    if kind is None or (value is None and name in _OPTIONAL):
        return value
    if kind is bool and (isinstance(value, bool) or _numpy_bool(value)):
        return bool(value)
    if kind is int and isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if kind is str and (isinstance(value, str) or (name in PATH_OPTIONS and isinstance(value, os.PathLike))):
        return os.fspath(value)
    if kind is tuple and isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping | Set):
        numbers_given = tuple(value)  # a list, a tuple, a numpy array: in input order (a set has none)
        if all(isinstance(number, numbers.Real) and not isinstance(number, bool) for number in numbers_given):
            return numbers_given
    text = _TEXT_PARSERS.get(name)
    said = f" or text such as {text[1]!r}" if text is not None else ""
    raise UsageError(f"{option(name)} must be {_TYPE_WORDS[kind]}{said}, got {value!r}")


def _numpy_bool(value: Any) -> bool:
    """``value`` is a numpy boolean (numpy is imported only for a value that is no plain bool)."""
    import numpy as np

    return isinstance(value, np.bool_)
