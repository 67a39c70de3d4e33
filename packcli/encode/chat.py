"""Chat records -> segments of text, each marked supervised (loss taken) or not, and markup or content.

Segments are tokenized separately, so no token merges across a prompt/response boundary. Content is tokenized
as text (a literal ``<|im_end|>`` typed by a user stays text); markup is tokenized with special tokens recognized.

The built-in ChatML renders ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message; an assistant turn's
content and its ``<|im_end|>\\n`` are supervised, and so is the document's EOS when the chat ends with an assistant
turn. A Jinja template (``--chat-template`` or a tokenizer directory's ``tokenizer_config.json``) is rendered
prefix by prefix: an assistant message's segment is what rendering it adds
after the generation prompt, so exactly the assistant's words and end marker are supervised.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packcli.encode.tokenizer import LoadedTokenizer
from packcli.errors import BadRecordError, PackcliError, UsageError

__all__ = ["ChatML", "JinjaTemplate", "Segment", "load_template"]

CHATML_MARKERS = ("<|im_start|>", "<|im_end|>")


@dataclass(frozen=True)
class Segment:
    """A piece of a document's text: ``supervised`` takes loss; ``markup`` is template text, not user content."""

    text: str
    supervised: bool
    markup: bool = False


Messages = list[dict[str, Any]]


class ChatML:
    """The built-in template."""

    name = "chatml"
    sha256 = hashlib.sha256(b"packcli chatml v1").hexdigest()

    def segments(self, messages: Messages, loss_on_all: bool) -> list[Segment]:
        """The chat as segments; assistant turns supervised (every segment with ``loss_on_all``)."""
        out = []
        for message in messages:
            supervised = loss_on_all or message["role"] == "assistant"
            out += [
                Segment(f"<|im_start|>{message['role']}\n", loss_on_all, markup=True),
                Segment(message["content"], supervised),
                Segment("<|im_end|>\n", supervised, markup=True),
            ]
        return out


class JinjaTemplate:
    """A Hugging Face style Jinja chat template, rendered in a sandbox."""

    def __init__(self, source: str, name: str, bos_token: str = "", eos_token: str = "") -> None:
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self.name = name
        self.source = source
        self.sha256 = hashlib.sha256(source.encode()).hexdigest()
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = _raise_exception
        try:
            self.template = environment.from_string(source)
        except TemplateError as exc:
            raise PackcliError(f"chat template does not compile: {exc}", name) from None
        self.specials = {"bos_token": bos_token, "eos_token": eos_token}

    def render(self, messages: Messages, add_generation_prompt: bool) -> str:
        """The template's text for ``messages``; any failure is a bad record."""
        try:
            return str(
                self.template.render(messages=messages, add_generation_prompt=add_generation_prompt, **self.specials)
            )
        except BadRecordError:
            raise
        except Exception as exc:  # a template can raise anything; the record is what is bad
            raise BadRecordError(f"chat template failed to render: {exc}") from None

    def segments(self, messages: Messages, loss_on_all: bool) -> list[Segment]:
        """The chat as segments, each what rendering one more message adds (see the module docstring)."""
        out: list[Segment] = []
        done = ""
        for end, message in enumerate(messages, start=1):
            supervised = loss_on_all or message["role"] == "assistant"
            if message["role"] == "assistant":
                prompt = self.render(messages[: end - 1], add_generation_prompt=True)
                _check_prefix(done, prompt)
                out.append(Segment(prompt[len(done) :], loss_on_all, markup=True))
                done = prompt
            rendered = self.render(messages[:end], add_generation_prompt=False)
            _check_prefix(done, rendered)
            out.append(Segment(rendered[len(done) :], supervised, markup=True))
            done = rendered
        return out


def _check_prefix(done: str, rendered: str) -> None:
    if not rendered.startswith(done):
        raise BadRecordError("chat template output changes earlier turns as turns are added; cannot mark turns")


def _raise_exception(message: str) -> None:
    raise BadRecordError(f"chat template raised: {message}")


def load_template(
    path: str | None, tokenizer: LoadedTokenizer, warn: Callable[[str], None], source: str | None = None
) -> ChatML | JinjaTemplate:
    """The template for chat records: ``--chat-template`` file, else the one in the tokenizer's
    ``tokenizer_config.json``, else ChatML (with a warning when the tokenizer lacks its markers as special tokens).
    ``source``: the ``--chat-template`` file's text as the driver read it (a worker then never opens ``path``)."""
    bos = tokenizer.tokenizer.id_to_token(tokenizer.bos_id) if tokenizer.bos_id is not None else None
    eos = tokenizer.tokenizer.id_to_token(tokenizer.eos_id) if tokenizer.eos_id is not None else None
    if path is not None:
        file = Path(path)
        if source is None:
            if not file.is_file():
                raise UsageError(f"--chat-template {path}: no such file")
            source = file.read_text(encoding="utf-8")
        return JinjaTemplate(source, str(file), bos or "", eos or "")
    configured = _configured_template(tokenizer.config.get("chat_template"))
    if configured is not None:
        return JinjaTemplate(configured, f"{tokenizer.name} tokenizer_config.json", bos or "", eos or "")
    missing = [marker for marker in CHATML_MARKERS if not tokenizer.is_special(marker)]
    if missing:
        warn(
            f"built-in ChatML with tokenizer {tokenizer.name}, which lacks {' and '.join(missing)} as special "
            "tokens: the markup is tokenized as plain text (pass --chat-template for this model's own format)"
        )
    return ChatML()


def _configured_template(value: object) -> str | None:
    """A config's ``chat_template``: a string, or the entry named "default" of a list of named templates."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        for entry in value:
            if isinstance(entry, dict) and entry.get("name") == "default" and isinstance(entry.get("template"), str):
                return str(entry["template"])
    return None
