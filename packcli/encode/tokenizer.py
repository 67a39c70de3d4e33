"""Load a tokenizer (bundled default, file, directory or cached hub name) as Hugging Face `tokenizers` builds it:
what a run needs of it before encoding is read from the file (:mod:`packcli.encode.facts`), and the build waits
for its first use.

Document text is encoded as text: special-token strings inside it (``<|endoftext|>``, ``</s>``) stay text, and
EOS/BOS are added by id. Truncation and padding configured in a ``tokenizer.json`` are switched off.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from tokenizers import Tokenizer

from packcli.encode.facts import TokenizerFacts, built_facts, read_facts
from packcli.errors import PackcliError, UsageError, option
from packcli.util.memory import release_free_memory

__all__ = [
    "LoadedTokenizer",
    "document_tokenizer",
    "encoding_started",
    "hf_tokenizer",
    "load_tokenizer",
    "refuse_byte_order_mark",
    "special_ids",
    "template_text",
    "use_threads",
    "utf8_text",
    "with_chat_template",
]

BUNDLED_NAME = "gpt2 (bundled)"
_EOS_NAMES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "[SEP]")
_BOS_NAMES = ("<s>", "<|begin_of_text|>", "<bos>", "[CLS]")


CONFIG_FILE = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"  # beside tokenizer_config.json in a recent hub snapshot
CHAT_TEMPLATE_DIRECTORY = "additional_chat_templates"  # named templates, NAME.jinja each, beside it


@dataclass(frozen=True)
class LoadedTokenizer:
    """A tokenizer with what the manifest records about it. What a run needs before it encodes (vocabulary size,
    EOS/BOS ids, added tokens, the fast backends' gate) is read from the ``tokenizer.json`` text
    (:attr:`facts`); Hugging Face's tokenizer (:attr:`tokenizer`) is built on first use, once per process."""

    source: str  # the tokenizer.json text (the backends and workers build from it too)
    name: str
    sha256: str
    vocab_size: int
    eos_id: int | None
    bos_id: int | None
    config: dict[str, object] = field(default_factory=dict)  # tokenizer_config.json beside the file, if any
    config_sha256: str | None = None  # of that file's bytes: an edited eos_token or chat template changes it
    config_path: str | None = None  # where a tokenizer_config.json would be (the tokenizer file's directory)

    @property
    def facts(self) -> TokenizerFacts:
        """The tokenizer as read from its file, without building it (once per process)."""
        return _facts(self.source, self.name)

    @property
    def tokenizer(self) -> Tokenizer:
        """Hugging Face's tokenizer, set to encode documents: built on first use (as a fast backend opens, for its
        cross-check; ``--tokenizer-backend hf``; decoding), once per process."""
        return _built(self.source, self.name)

    def describe(self) -> dict[str, object]:
        """The manifest's ``tokenizer`` entry; ``specials_in_text`` (only where true) when text may encode to the
        BOS or EOS id, so verify does not hold a document's inner tokens to being neither."""
        entry: dict[str, object] = {
            "name": self.name,
            "sha256": self.sha256,
            "config_sha256": self.config_sha256,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "bos_id": self.bos_id,
        }
        if self.specials_in_text():
            entry["specials_in_text"] = True
        return entry

    def specials_in_text(self) -> bool:
        """Whether the BOS or EOS id is no special added token (a tokenizer_config.json may name an ordinary one):
        documents are encoded with special-token strings as text, so only special tokens stay out of their ids."""
        added = self.facts.added
        return any(
            token_id is not None and not (token_id in added and added[token_id].special)
            for token_id in (self.bos_id, self.eos_id)
        )

    def is_special(self, token: str) -> bool:
        """True when ``token`` is one of the tokenizer's special (added, control) tokens."""
        return any(t.content == token and t.special for t in self.facts.added.values())


def load_tokenizer(spec: str | None = None, eos_token: str | None = None) -> LoadedTokenizer:
    """Load the tokenizer named by ``--tokenizer``.

    Args:
        spec: None for the bundled GPT-2 tokenizer, a ``tokenizer.json`` path, a directory holding one, or a hub
            name already in the local Hugging Face cache (nothing is downloaded).
        eos_token: the EOS token's text when the tokenizer's own cannot be found.
    """
    config: dict[str, object] = {}
    config_sha256 = config_path = None
    if spec is None:
        raw = gzip.decompress(resources.files("packcli").joinpath("assets/gpt2/tokenizer.json.gz").read_bytes())
        name = BUNDLED_NAME
    else:
        path = _locate(spec)
        name = spec
        raw = path.read_bytes()
        config, config_sha256 = _read_config(path.parent)  # the same directory however --tokenizer is spelled
        config_path = str(path.parent / CONFIG_FILE)
    source = utf8_text(raw, "tokenizer.json", name)
    facts = _facts(source, name)
    eos = _token_id(facts, eos_token or _configured(config, "eos_token"), _EOS_NAMES, name, "EOS")
    bos = _token_id(facts, _configured(config, "bos_token"), _BOS_NAMES, name, "BOS")
    sha256 = hashlib.sha256(raw).hexdigest()
    return LoadedTokenizer(source, name, sha256, facts.vocab_size, eos, bos, config, config_sha256, config_path)


@functools.lru_cache(maxsize=2)
def _facts(source: str, name: str) -> TokenizerFacts:
    """The facts of a tokenizer.json text: read from it, or from Hugging Face's build where the reader does not
    take the file (a broken file is then Hugging Face's error, named); once per process (the last two kept)."""
    facts = read_facts(source)
    return facts if facts is not None else built_facts(_built(source, name))


def _built(source: str, name: str) -> Tokenizer:
    try:
        return document_tokenizer(source)
    except Exception as exc:  # tokenizers raises a bare Exception on a corrupt file
        raise PackcliError(f"not a valid tokenizer.json: {exc}", None if name == BUNDLED_NAME else name) from None


@functools.lru_cache(maxsize=2)
def document_tokenizer(source: str) -> Tokenizer:
    """The Hugging Face tokenizer that encodes documents for a ``tokenizer.json`` text, built once per process (the
    last two texts kept): a Python caller packing again, or in-process jobs after set-up, reuse it (Tekken: 0.3 s
    and 70 MiB a build). Shared, so nothing may change its settings."""
    return hf_tokenizer(source)


def hf_tokenizer(source: str) -> Tokenizer:
    """The Hugging Face tokenizer of a ``tokenizer.json`` text, set to encode documents: special-token strings
    stay text, no truncation, no padding."""
    # From UTF-8 bytes made for the build and dropped after it: from_str would give ``source`` (kept for the run) a
    # UTF-8 copy of itself for life (Tekken: 7 MiB beside its 12 MiB of text).
    tokenizer = Tokenizer.from_buffer(source.encode("utf-8"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    tokenizer.encode_special_tokens = True
    release_free_memory()  # the build's scratch, several times the tokenizer (Tekken: about 250 MiB for 70 kept)
    return tokenizer


def _locate(spec: str) -> Path:
    """Resolve ``--tokenizer`` to a ``tokenizer.json`` on disk, looking in the hub cache only, never online."""
    path = Path(spec)
    if path.is_file():
        return path
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            return path / "tokenizer.json"
        raise PackcliError("directory holds no tokenizer.json", path)
    from huggingface_hub import try_to_load_from_cache

    cached = None
    if spec.count("/") <= 1 and not spec.startswith((".", "/")):
        cached = try_to_load_from_cache(spec, "tokenizer.json")
    if isinstance(cached, str):
        return Path(cached)
    raise PackcliError(
        "no such tokenizer file or directory, and no hub model of that name in the local cache; "
        "packcli does not download: pass a tokenizer.json path, or fetch the model into the cache first",
        spec,
    )


def _read_config(directory: Path) -> tuple[dict[str, object], str | None]:
    """``tokenizer_config.json`` beside the tokenizer file (a hub snapshot keeps both in one directory) and the
    sha256 of its bytes; ({}, None) when there is none. A ``chat_template.jinja`` there is read only by a run that
    renders chats with it (:func:`with_chat_template`)."""
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        return {}, None
    raw = _read_bytes(config_path)
    try:
        config = json.loads(utf8_text(raw, CONFIG_FILE, config_path))
    except ValueError as exc:
        raise PackcliError(f"cannot read: {exc}", config_path) from None
    if not isinstance(config, dict):
        raise PackcliError("not a JSON object", config_path)
    return config, hashlib.sha256(raw).hexdigest()


def with_chat_template(loaded: LoadedTokenizer) -> LoadedTokenizer:
    """``loaded`` with the template files beside its file as its config's ``chat_template``, as transformers loads
    them: ``chat_template.jinja`` is the default and each ``additional_chat_templates/NAME.jinja`` the template
    NAME (where ``save_pretrained`` writes named templates), together replacing the config's own; ``loaded``
    itself where there are none. Only a run that renders chats with the tokenizer's template calls it, so a text
    pack never reads those files."""
    if loaded.config_path is None:
        return loaded
    directory = Path(loaded.config_path).parent
    files = {"default": directory / CHAT_TEMPLATE_FILE} if (directory / CHAT_TEMPLATE_FILE).is_file() else {}
    if (directory / CHAT_TEMPLATE_DIRECTORY).is_dir():
        named = sorted((directory / CHAT_TEMPLATE_DIRECTORY).glob("*.jinja"))
        files.update({path.name.removesuffix(".jinja"): path for path in named if path.is_file()})
    if not files:
        return loaded
    templates = {name: template_text(_read_bytes(path), path) for name, path in files.items()}
    if list(templates) == ["default"]:
        return replace(loaded, config={**loaded.config, "chat_template": templates["default"]})
    listed = [{"name": name, "template": template} for name, template in templates.items()]
    return replace(loaded, config={**loaded.config, "chat_template": listed})


def _read_bytes(path: Path) -> bytes:
    """The bytes of a file beside the tokenizer; one it cannot read is a data error naming it."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise PackcliError(f"cannot read: {exc}", path) from None


def utf8_text(raw: bytes, what: str, path: str | Path) -> str:
    """``raw`` as text; bytes that are not UTF-8 are a data error naming ``path``, which holds ``what`` (a
    "tokenizer.json", a "chat template"), and the offset of the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PackcliError(f"not a valid {what}: not UTF-8 ({exc.reason} at byte {exc.start})", path) from None


def template_text(raw: bytes, path: str | Path) -> str:
    """A chat template file's text (``path``: a ``--chat-template`` file, a ``chat_template.jinja``). Bytes that are
    not UTF-8 are a data error (:func:`utf8_text`), and so is a leading byte order mark: Jinja, and
    apply_chat_template, which reads the file as plain UTF-8, render it as text before every chat."""
    text = utf8_text(raw, "chat template", path)
    refuse_byte_order_mark(text, path)
    return text


def refuse_byte_order_mark(template: str, path: str | Path | None, what: str = "") -> None:
    """Refuse a chat template (``what`` names it within ``path``: a config's ``chat_template``; "" for a file's
    text) that opens with a byte order mark, which Jinja renders as text before every chat.

    Raises:
        PackcliError: the template's first character is U+FEFF; the message names ``path``.
    """
    if template.startswith("\ufeff"):
        raise PackcliError(
            f"{what + ' ' if what else ''}starts with a UTF-8 byte order mark, which the template would render as "
            "text (U+FEFF) at the start of every chat: remove it",
            path,
        )


def _configured(config: dict[str, object], key: str) -> str | None:
    value = config.get(key)
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _token_id(facts: TokenizerFacts, wanted: str | None, known: tuple[str, ...], name: str, what: str) -> int | None:
    if wanted is not None:
        token_id = facts.token_to_id(wanted)
        if token_id is None:
            raise UsageError(f"{what} token {wanted!r} is not in the vocabulary of tokenizer {name}")
        return int(token_id)
    # Only special (added) tokens qualify: "<s>" can also be an ordinary BPE token, as in Qwen's vocabulary.
    specials = {token.content: token_id for token_id, token in facts.added.items()}
    for candidate in known:
        if candidate in specials:
            return int(specials[candidate])
    return None


_encoding_started = False  # use_threads ran in this process: a tokenizer's thread pool may be running


def use_threads(threads: int | None) -> None:
    """Size the tokenizer's thread pool: ``threads`` (None: every core). The Rust pool reads ``RAYON_NUM_THREADS``
    once, as it starts on the first encode, so this is the one place packcli sets it, from the option's value
    (``--workers``, or a worker's share of the cores); once the pool runs, nothing changes it. Every encoding
    job calls it first."""
    global _encoding_started
    _encoding_started = True
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    if threads is not None:
        os.environ["RAYON_NUM_THREADS"] = str(threads)


def encoding_started() -> bool:
    """Whether this process may have started a tokenizer's thread pool (it ran an encoding job): a process forked
    from it would inherit the pool without its threads."""
    return _encoding_started


def special_ids(loaded: LoadedTokenizer, eos: bool, bos: bool) -> tuple[int | None, int | None]:
    """The EOS and BOS ids to add to every document, or a usage error when one is asked for and missing."""
    if eos and loaded.eos_id is None:
        raise UsageError(
            f"tokenizer {loaded.name} has no EOS token that packcli can find; use {option('eos_token')} or "
            f"{option('eos', False)}"
        )
    if bos and loaded.bos_id is None:
        raise UsageError(f"tokenizer {loaded.name} has no BOS token; drop {option('bos', True)}")
    return (loaded.eos_id if eos else None), (loaded.bos_id if bos else None)
