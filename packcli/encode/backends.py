"""Encoding backends: Hugging Face ``tokenizers`` (the reference, and the fallback), and two faster byte-level BPE
libraries that reproduce it exactly for the tokenizer kinds they are allowed here: ``gigatoken``
(:mod:`packcli.encode.gigatoken_backend`) and ``fastokens``.

``--tokenizer-backend auto`` takes the first of :data:`FAST_BACKENDS` that opens when the tokenizer is of a kind
listed in :func:`fast_refusal`: it imports, loads the tokenizer, and gives every added token Hugging Face's id; else
Hugging Face. The manifest says why a fast backend was passed over (``backend_fallback``). ``hf`` always takes
Hugging Face. Invariant: a backend never changes a token (the run cross-checks a sample of its documents against
Hugging Face, :mod:`packcli.encode.crosscheck`), so the output bytes do not depend on the backend, and neither does
the fingerprint; the manifest records which one ran.

A backend encodes in two steps, so a helper thread does the encoding and the main thread the conversion:
``encode`` (releases the GIL) and ``ids`` (every text's ids as one flat int32 array, and their int64 lengths).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib import metadata
from typing import Any, Protocol

import numpy as np
from tokenizers import Tokenizer

from packcli.encode import gigatoken_backend
from packcli.encode.facts import TokenizerFacts
from packcli.encode.gigatoken_backend import GigatokenBackend
from packcli.encode.tokenizer import LoadedTokenizer, hf_tokenizer
from packcli.util.memory import release_free_memory

__all__ = [
    "FAST_BACKENDS",
    "Backend",
    "Backends",
    "HFBackend",
    "Refused",
    "fast_refusal",
    "open_backends",
    "takes_tokens",
]


class Backend(Protocol):
    """Encodes texts to token ids; special-token strings stay text or are recognized, as the backend was opened."""

    def encode(self, texts: list[str]) -> Any:
        """A helper thread: encode ``texts`` (the GIL is released meanwhile)."""
        ...

    def ids(self, encoded: Any) -> tuple[np.ndarray, np.ndarray]:
        """The main thread: the encoded texts' ids, concatenated (int32), and each text's count (int64)."""
        ...


class HFBackend:
    """Hugging Face ``tokenizers``: the reference. Given a function that builds it, it is built on first use (a
    set-up that only describes the run builds none); the cross-check's is built as the fast backend opens."""

    def __init__(self, tokenizer: Tokenizer | Callable[[], Tokenizer]) -> None:
        self._tokenizer = tokenizer

    @property
    def tokenizer(self) -> Tokenizer:
        return self.build()

    def build(self) -> Tokenizer:
        """The tokenizer, built now if it was not (no encoding: that would start its thread pool)."""
        if not isinstance(self._tokenizer, Tokenizer):
            self._tokenizer = self._tokenizer()
        return self._tokenizer

    def encode(self, texts: list[str]) -> list[Any]:
        return self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)

    def ids(self, encoded: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        return flat_ids([encoding.ids for encoding in encoded])

    def id_lists(self, texts: list[str]) -> list[list[int]]:
        """Each text's ids as a list (the cross-check compares these). One ``encode`` per text, on this thread: the
        batch call hands a check's few texts to the tokenizer's thread pool and gives up the GIL, and the encoding
        thread then waits for both, on every check, while the other threads read (a loaded real-size run's checks
        took 1.2-2.0 s that way, 0.3 s so; docs/cli.md)."""
        return [self.tokenizer.encode(text, add_special_tokens=False).ids for text in texts]


class FastBackend:
    """fastokens: each batch comes back as one buffer of ids and one of offsets, no Python object per token."""

    def __init__(self, tokenizer: Any, specials_as_text: bool) -> None:
        self.tokenizer = tokenizer
        self.split_special_tokens = specials_as_text

    def encode(self, texts: list[str]) -> tuple[bytes, bytes]:
        result: tuple[bytes, bytes] = self.tokenizer.encode_batch_flat(
            texts, add_special_tokens=False, split_special_tokens=self.split_special_tokens
        )
        return result

    def ids(self, encoded: tuple[bytes, bytes]) -> tuple[np.ndarray, np.ndarray]:
        ids, offsets = encoded
        # ids are below the vocabulary size, so the uint32 values read as int32 unchanged: no copy
        return np.frombuffer(ids, dtype="<i4"), np.diff(np.frombuffer(offsets, dtype="<i8"))


def flat_ids(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-text id lists as one flat int32 array and int64 lengths."""
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    return np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum())), lengths


@dataclass(frozen=True)
class Backends:
    """The backend a run encodes with: ``text`` keeps special-token strings as text (documents), ``markup``
    recognizes them (chat template markup; None unless asked for). ``reference`` is Hugging Face in the same two
    modes, for the cross-check (None when Hugging Face is the backend: nothing to check)."""

    name: str  # "gigatoken", "fastokens" or "hf"
    version: str
    text: Backend
    markup: Backend | None
    reference_text: HFBackend | None
    reference_markup: HFBackend | None
    fallback: str | None = None  # why auto passed over the fast backends before this one (None: none, or hf asked)

    def build_all(self) -> None:
        """Build now what encoding would build or import on first use: the Hugging Face tokenizers (the
        cross-check's, already built where a fast backend opened; those that encode with ``hf``), and gigatoken's
        array library. A worker process does, before it forks the others, which then share them instead of each
        building its own."""
        for backend in (self.text, self.markup, self.reference_text, self.reference_markup):
            if isinstance(backend, HFBackend):
                backend.build()
        if isinstance(self.text, GigatokenBackend):
            self.text.import_arrays()

    def describe(self) -> dict[str, str]:
        """The manifest's record of the backend that ran (outside the fingerprint), and why auto fell back."""
        record = {"backend": self.name, "backend_version": self.version}
        return record if self.fallback is None else {**record, "backend_fallback": self.fallback}


def takes_tokens(requested: str, encoded_by: str | None) -> bool:
    """Whether a run of ``--tokenizer-backend requested`` takes tokens that ``encoded_by`` encoded (an output of its
    fingerprint, a tokenization cache entry, a committed partition): ``auto`` takes any backend's, an explicit
    ``hf`` (the remedy where a fast backend is doubted) only Hugging Face's. ``encoded_by`` None: no tokenizer ran
    (pre-tokenized records) or the record predates the fast backend, so Hugging Face's."""
    return requested != "hf" or encoded_by in (None, "hf")


_built: dict[str, Any] = {}  # fastokens tokenizers built in this process, by their tokenizer.json text


def _load_fastokens(loaded: LoadedTokenizer) -> Any:
    """fastokens' tokenizer for ``loaded`` (raises what fastokens raises), built once per process: a worker runs
    several partitions, and building one takes about a second (Tekken)."""
    import fastokens

    if loaded.source not in _built:
        tokenizer = fastokens.Tokenizer.from_json_str(loaded.source)
        tokenizer.no_truncation()
        tokenizer.no_padding()
        release_free_memory()  # the build's scratch, about three times the tokenizer it keeps (Tekken)
        _built[loaded.source] = tokenizer
    return _built[loaded.source]


class Refused(Exception):
    """A fast backend does not encode this tokenizer; the message says why (the manifest's ``backend_fallback``)."""


Opened = tuple[Backend, Backend | None]  # a fast backend's text and markup (None unless asked for) encoders


def _open_gigatoken(loaded: LoadedTokenizer, markup: bool) -> Opened:
    reason = gigatoken_backend.refusal(loaded)
    if reason is not None:
        raise Refused(reason)
    try:
        text = gigatoken_backend.load_gigatoken(loaded, False)
        marking = gigatoken_backend.load_gigatoken(loaded, True) if markup else None
    except ImportError as exc:
        raise Refused(f"gigatoken cannot be imported ({exc})") from None
    except Exception as exc:  # gigatoken raises ValueError on a pre-tokenizer or model it does not run
        raise Refused(f"gigatoken cannot load it ({_first_line(exc)})") from None
    reason = None if marking is None else gigatoken_backend.markup_refusal(loaded, marking)
    if reason is not None:
        raise Refused(reason)
    return GigatokenBackend(text), GigatokenBackend(marking) if marking is not None else None


def _open_fastokens(loaded: LoadedTokenizer, markup: bool) -> Opened:
    try:
        fast = _load_fastokens(loaded)
    except ImportError as exc:
        raise Refused(f"fastokens cannot be imported ({exc})") from None
    except Exception as exc:  # fastokens raises ValueError or its own errors on what it cannot load
        raise Refused(f"fastokens cannot load it ({_first_line(exc)})") from None
    reason = _added_ids_refusal(loaded.facts, fast)
    if reason is not None:
        raise Refused(reason)
    return FastBackend(fast, True), FastBackend(fast, False) if markup else None


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# The fast backends auto tries, in order (the first that opens encodes), by distribution name (the manifest records
# its version): gigatoken builds in about a third of fastokens' CPU time (docs/performance.md); fastokens runs where
# gigatoken refuses (Kimi's regex, a non-special added token). Tests replace an entry (a backend that gets one id
# wrong, for the cross-check's test).
FAST_BACKENDS: dict[str, Callable[[LoadedTokenizer, bool], Opened]] = {
    "gigatoken": _open_gigatoken,
    "fastokens": _open_fastokens,
}


def open_backends(loaded: LoadedTokenizer, requested: str, markup: bool) -> Backends:
    """The backends for ``--tokenizer-backend requested`` ("auto" or "hf"); ``markup``: also one that recognizes
    special tokens. Where auto passes over a fast backend, the reason is recorded (``fallback``, in the manifest),
    not said on stderr: the user asked for no backend in particular, and there is nothing for them to do."""
    reference_text = HFBackend(lambda: loaded.tokenizer)
    reference_markup = HFBackend(lambda: _with_specials(loaded)) if markup else None
    hf = Backends("hf", metadata.version("tokenizers"), reference_text, reference_markup, None, None)
    if requested == "hf":
        return hf
    refusal = fast_refusal(loaded.facts)
    if refusal is not None:
        return replace(hf, fallback=refusal)
    # The cross-check's Hugging Face build first, while the process holds little: its scratch (Tekken: about 180
    # MiB, given back after it) then lands on an almost empty heap, not on the fast backend's tokenizer and the
    # batches in flight, where it raised a whole run's peak by 70 MiB and left the heap fragmented (docs/performance.md)
    reference_text.build()
    if reference_markup is not None:
        reference_markup.build()
    reasons = []
    for name, opener in FAST_BACKENDS.items():
        try:
            text, marking = opener(loaded, markup)
        except Refused as exc:
            reasons.append(str(exc))
            continue
        why = "; ".join(reasons) or None
        return Backends(name, metadata.version(name), text, marking, reference_text, reference_markup, why)
    return replace(hf, fallback="; ".join(reasons))


_marking: dict[str, Tokenizer] = {}  # Hugging Face tokenizers that recognize specials, by their tokenizer.json text


def _with_specials(loaded: LoadedTokenizer) -> Tokenizer:
    """A Hugging Face tokenizer like ``loaded``'s that recognizes special-token strings (for template markup), built
    once per process: set-up and the run each open the backends, and one build of Tekken takes 0.3 s and 70 MiB."""
    if loaded.source not in _marking:
        tokenizer = hf_tokenizer(loaded.source)
        tokenizer.encode_special_tokens = False
        _marking[loaded.source] = tokenizer
    return _marking[loaded.source]


_FAST_MODELS = ("BPE",)


def fast_refusal(facts: TokenizerFacts) -> str | None:
    """Why no fast backend is used for a tokenizer (its ``facts``), or None when it is of a kind the fast backends
    reproduce exactly (each may still refuse it: :data:`FAST_BACKENDS`).

    Allowed, conservatively (what was checked against Hugging Face on real corpora): a BPE model without dropout,
    byte fallback, unknown token or subword affixes; no normalizer; a ``ByteLevel`` pre-tokenizer (GPT-2's), or a
    ``Sequence`` of one isolating ``Split`` whose regex is one of :data:`NATIVE_SPLIT_REGEXES` and ``ByteLevel``
    (the tiktoken-style tokenizers), neither adding a prefix space; added tokens without ``lstrip``, ``rstrip``,
    ``normalized`` or ``single_word``; no post-processor other than ``ByteLevel`` or ``TemplateProcessing``
    (packcli adds no special tokens on encode).
    """
    kind = facts.model["type"]
    if kind not in _FAST_MODELS:
        return f"its model is {kind}, not byte-level BPE"
    for attribute in ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"):
        if facts.model.get(attribute):
            return f"its BPE model sets {attribute}"
    if facts.normalizer is not None:
        return f"it has a normalizer ({facts.normalizer.get('type')})"
    refusal = _pre_tokenizer_refusal(facts.pre_tokenizer or {})
    if refusal is not None:
        return refusal
    post = facts.post_processor or {}
    post_kinds = [step.get("type") for step in post.get("processors", [post])] if post else []
    if any(kind not in ("ByteLevel", "TemplateProcessing") for kind in post_kinds):
        return f"its post-processor is {'+'.join(map(str, post_kinds))}"
    for token in facts.added.values():
        flags = [flag for flag in ("lstrip", "rstrip", "normalized", "single_word") if getattr(token, flag)]
        if flags:
            return f"added token {token.content!r} sets {', '.join(flags)}"
    return None


def _added_ids_refusal(facts: TokenizerFacts, fast: Any) -> str | None:
    """Why fastokens is not used when it gives an added token another id than Hugging Face does (a tokenizer.json
    whose added token has the content of a vocabulary entry under another id: Hugging Face takes the entry's)."""
    for token in facts.added.values():
        ours, theirs = facts.token_to_id(token.content), fast.token_to_id(token.content)
        if ours != theirs:
            return f"added token {token.content!r} is id {theirs} to fastokens, {ours} to Hugging Face"
    return None


# The Split regexes fastokens runs on its own scanner, whose character classes are Hugging Face's (Oniguruma's), as
# fastokens recognizes them: by exact string. Any other regex runs on its generic PCRE2 engine, which classifies
# characters otherwise (U+180E as whitespace, 1,520 code points under \w, \p{Han} as Script_Extensions), so it
# is not allowed, however close to one of these: Qwen's wrapped in (?:...), or GPT-2's written as a Split.
NATIVE_SPLIT_REGEXES = {
    "Llama 3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+",
    "Qwen": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+",
    "Qwen 3.5": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+",
    "Tekken": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "o200k": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "Kimi": r"[\p{Han}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


def _pre_tokenizer_refusal(pre: dict[str, Any]) -> str | None:
    steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    kinds = [str(step.get("type")) for step in steps]
    if kinds == ["ByteLevel"] or (kinds == ["Split", "ByteLevel"] and _isolating_regex(steps[0])):
        byte_level = steps[-1]
        if byte_level.get("add_prefix_space"):
            return "its ByteLevel pre-tokenizer adds a prefix space"
        if kinds == ["ByteLevel"]:
            return None
        if byte_level.get("use_regex", True):  # Hugging Face's default, where the file leaves it out
            return "its ByteLevel pre-tokenizer runs its own regex after a Split"
        if steps[0]["pattern"]["Regex"] not in NATIVE_SPLIT_REGEXES.values():
            return (
                "its Split regex is none of those fastokens runs natively (GPT-2's ByteLevel, "
                f"{', '.join(NATIVE_SPLIT_REGEXES)}, character for character); its regex engine classifies some "
                "characters otherwise than Hugging Face's"
            )
        return None
    return f"its pre-tokenizer is {'+'.join(kinds) if pre else 'missing'}, not byte-level"


def _isolating_regex(split: dict[str, Any]) -> bool:
    return split.get("behavior") == "Isolated" and not split.get("invert") and "Regex" in split.get("pattern", {})
