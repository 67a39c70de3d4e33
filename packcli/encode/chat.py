"""Chat records -> segments of text, each marked supervised (loss taken) or not, and markup or content.

Segments are tokenized separately, so no token merges across a prompt/response boundary. Content is tokenized
as text (a literal ``<|im_end|>`` typed by a user stays text); markup is tokenized with special tokens recognized.

The built-in ChatML renders ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message; an assistant turn's
content and its ``<|im_end|>\\n`` are supervised, and so is the document's EOS when the chat ends with an assistant
turn. A Jinja template (``--chat-template`` or a tokenizer directory's ``tokenizer_config.json``) is rendered
prefix by prefix: an assistant message's segment is what rendering it adds
after the generation prompt, so exactly the assistant's words and end marker are supervised. Where a later message
changes the rendering of messages after the last assistant turn (Qwen2.5 closes a run of ``tool`` results after
the last one only), those messages are one segment. A record's tool definitions (``--tools-field``) reach a Jinja
template as ``tools``, as ``apply_chat_template(messages, tools=...)`` passes them; a record without them renders as
one before the option (no ``tools`` variable). The built-in ChatML renders no tools: a record carrying some is bad.

A chat whose rendering ends with EOS followed only by blank characters (Unicode whitespace or format characters
such as U+200B; Qwen2.5-Instruct: EOS ``<|im_end|>``, each turn ending ``<|im_end|>\\n``) ends at that EOS: the
blank text after it is dropped, and pack appends no second EOS.
Under a Jinja template content is tokenized with the markup, so special-token text a message holds becomes special
tokens (as with ``apply_chat_template``); such messages are counted where their content adds special-token text to
the rendering. A message with null content (an assistant's tool calls, OpenAI style) reaches a Jinja template as
None (null content is checked to be a tool call's); the built-in ChatML, which renders no tool calls, refuses any
message carrying some, whatever its content.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, replace
from typing import Any

from packcli.encode.tokenizer import LoadedTokenizer
from packcli.errors import BadRecordError, PackcliError, option
from packcli.options import DEFAULT_TOOLS_FIELD, PackOptions
from packcli.read.fields import ReadCounts

__all__ = [
    "ChatML",
    "ChatReader",
    "JinjaTemplate",
    "RenderedChat",
    "Segment",
    "chat_totals",
    "counted_segments",
]

CHATML_MARKERS = ("<|im_start|>", "<|im_end|>")
NO_PROMPT = (  # what fails to render where a chat opens with an assistant turn
    " the chat before its first assistant turn, which is message 1 (no messages: packcli renders what precedes each "
    "assistant turn, with add_generation_prompt, to find where its words begin)"
)


@dataclass(frozen=True)
class Segment:
    """A piece of a document's text: ``supervised`` takes loss; ``markup`` is template text, not user content."""

    text: str
    supervised: bool
    markup: bool = False


Messages = list[dict[str, Any]]
Tools = list[dict[str, Any]] | None


class ChatML:
    """The built-in template."""

    name = "chatml"
    sha256 = hashlib.sha256(b"packcli chatml v1").hexdigest()
    probe_tools: Tools = None

    def segments(self, messages: Messages, loss_on_all: bool, tools: Tools = None) -> list[Segment]:
        """The chat as segments; assistant turns supervised (every segment with ``loss_on_all``)."""
        if tools:
            raise BadRecordError(
                f"record has {len(tools)} tool definition(s), which the built-in ChatML cannot render: pass "
                f"{option('chat_template')} with a template that renders tools, or {option('tools_field', repr(''))} "
                "to leave them out"
            )
        out = []
        for number, message in enumerate(messages, start=1):
            calls = message.get("tool_calls")
            if calls:  # its content alone (null, empty or words) would drop the calls
                count = len(calls) if isinstance(calls, list) else 1
                raise BadRecordError(
                    f"message {number} carries {count} tool call(s), which the built-in ChatML cannot render: pass "
                    f"{option('chat_template')} with a template that renders tool calls"
                )
            supervised = loss_on_all or message["role"] == "assistant"
            out += [
                Segment(f"<|im_start|>{message['role']}\n", loss_on_all, markup=True),
                Segment(message["content"], supervised),
                Segment("<|im_end|>\n", supervised, markup=True),
            ]
        return out


class JinjaTemplate:
    """A Hugging Face style Jinja chat template, rendered in a sandbox: ``source`` for every record, or, of a config's
    named templates, ``tool_use`` for a record with tools and ``source`` ("default"; None: none) for the others, as
    ``apply_chat_template`` picks them."""

    def __init__(
        self, source: str | None, name: str, bos_token: str = "", eos_token: str = "", tool_use: str | None = None
    ) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self.name = name
        self.source = source
        named = source if tool_use is None else json.dumps({"default": source, "tool_use": tool_use}, sort_keys=True)
        self.sha256 = hashlib.sha256(str(named).encode()).hexdigest()
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = _raise_exception
        environment.filters["tojson"] = _tojson
        self.template = None if source is None else self._compiled(environment, source)
        self.tool_use = None if tool_use is None else self._compiled(environment, tool_use)
        self.probe_tools: Tools = None if source is not None else []  # a probe chat renders as a record would
        self.specials = {"bos_token": bos_token, "eos_token": eos_token}

    def _compiled(self, environment: Any, source: str) -> Any:
        from jinja2.exceptions import TemplateError

        try:
            return environment.from_string(source)
        except TemplateError as exc:
            raise PackcliError(f"chat template does not compile: {exc}", self.name) from None

    def render(self, messages: Messages, add_generation_prompt: bool, tools: Tools = None, what: str = "") -> str:
        """The template's text for ``messages`` (and ``tools``, if any); any failure is a bad record, ``what``
        saying what was rendered where the messages alone would not tell the user."""
        given = {} if tools is None else {"tools": tools}
        template = self.tool_use if tools is not None and self.tool_use is not None else self.template
        if template is None:
            raise BadRecordError(
                f"no default chat template: {self.name} has 'tool_use', which apply_chat_template renders for a "
                "record with tools, and no 'default' for a record without them, as this one is; add a 'default' "
                f"template, or pass {option('chat_template')}"
            )
        try:
            return str(
                template.render(
                    messages=messages, add_generation_prompt=add_generation_prompt, **given, **self.specials
                )
            )
        except BadRecordError:
            raise
        except Exception as exc:  # a template can raise anything; the record is what is bad
            raise BadRecordError(f"chat template failed to render{what}: {exc}") from None

    def segments(self, messages: Messages, loss_on_all: bool, tools: Tools = None) -> list[Segment]:
        """The chat as segments, each what rendering one more message adds (see the module docstring)."""
        out: list[Segment] = []
        done = ""
        settled = (0, "")  # the segments and text up to the last assistant turn, which no later message may change
        for end, message in enumerate(messages, start=1):
            assistant = message["role"] == "assistant"
            if assistant:
                prompt = self.render(messages[: end - 1], True, tools, "" if end > 1 else NO_PROMPT)
                done = _added(out, done, prompt, Segment("", loss_on_all, markup=True), settled)
                settled = (len(out), done)
            rendered = self.render(messages[:end], add_generation_prompt=False, tools=tools)
            if assistant:
                _check_prompted(done, out[-1].text, rendered, end)
            done = _added(out, done, rendered, Segment("", loss_on_all or assistant, markup=True), settled)
            if assistant:
                settled = (len(out), done)
        return out


def _added(out: list[Segment], done: str, rendered: str, kind: Segment, settled: tuple[int, str]) -> str:
    """Appends to ``out`` what ``rendered`` adds to ``done``, as a segment like ``kind``; returns ``rendered``.

    Where ``rendered`` changes text after the last assistant turn (``settled``: Qwen2.5 closes a run of ``tool``
    results after the last one only), the unsupervised segments since that turn are one segment with the new text.
    """
    if not rendered.startswith(done):
        count, done = settled
        _check_prefix(done, rendered)
        del out[count:]
    out.append(replace(kind, text=rendered[len(done) :]))
    return rendered


@dataclass(frozen=True)
class RenderedChat:
    """One chat record as segments, how many of its messages hold text the template turns into special tokens, and
    whether it had tools."""

    segments: list[Segment]
    special_text_messages: int
    with_tools: bool = False


class ChatReader:
    """Turns each chat record, as it is read, into a :class:`RenderedChat` under one template.

    Args:
        template: the chat template.
        loss_on_all: supervise every segment (``--loss-on all``).
        eos_token: the EOS pack appends (None: none): a rendering that ends with it and whitespace ends at it.
        specials: the tokenizer's special tokens, which content rendered by a Jinja template may turn into.
    """

    def __init__(
        self, template: ChatML | JinjaTemplate, loss_on_all: bool, eos_token: str | None, specials: list[str]
    ) -> None:
        self.template, self.loss_on_all, self.eos_token = template, loss_on_all, eos_token
        in_markup = isinstance(template, JinjaTemplate) and specials  # ChatML tokenizes content as text
        self.specials = re.compile("|".join(map(re.escape, specials))) if in_markup else None

    @classmethod
    def of(
        cls, template: ChatML | JinjaTemplate, loss_on_all: bool, tokenizer: LoadedTokenizer, eos_id: int | None
    ) -> ChatReader:
        """The reader for ``tokenizer`` appending ``eos_id`` (None: no EOS)."""
        eos = tokenizer.facts.id_to_token(eos_id) if eos_id is not None else None
        specials = [token.content for token in tokenizer.facts.added.values() if token.special]
        return cls(template, loss_on_all, eos, specials)

    def __call__(self, values: list[Any]) -> RenderedChat:
        """``values``: the record's messages, then its tools where a tools field is read (None: the record has none;
        left out: a table without that column)."""
        messages, tools = values[0], values[1] if len(values) > 1 else None
        segments = self.template.segments(messages, self.loss_on_all, tools)
        holding = self.special_text_messages(messages, segments, tools)
        if self.eos_token:
            segments = ended_at_eos(segments, self.eos_token)
        return RenderedChat(segments, holding, tools is not None)

    def special_text_messages(self, messages: Messages, segments: list[Segment], tools: Tools = None) -> int:
        """How many of ``messages`` hold special-token text that their rendering (``segments``) carries: a message
        the template never renders (a ``tool`` message a template skips) is not counted. A message counts when the
        chat rendered with that message's content emptied holds fewer special-token texts (where the template
        refuses an empty content: when its content, as given or stripped, is in the rendering). Rendered once more
        per message holding such text, which few do."""
        found, template = self.specials, self.template
        if found is None or not isinstance(template, JinjaTemplate):
            return 0
        held = [
            k
            for k, message in enumerate(messages)
            if isinstance(message["content"], str) and found.search(message["content"])
        ]
        if not held:
            return 0
        rendered = "".join(segment.text for segment in segments)
        total = len(found.findall(rendered))
        counted = 0
        for k in held:
            content = messages[k]["content"]
            try:
                emptied = [*messages[:k], {**messages[k], "content": ""}, *messages[k + 1 :]]
                emptied_text = template.render(emptied, False, tools)
            except BadRecordError:
                counted += content in rendered or content.strip() in rendered
                continue
            counted += len(found.findall(emptied_text)) < total
        return counted


def counted_segments(chats: list[RenderedChat], counts: ReadCounts) -> list[list[Segment]]:
    """The chats' segments; their messages holding special-token text, and those with tools, are added to
    ``counts``."""
    counts.special_text_messages += sum(chat.special_text_messages for chat in chats)
    counts.records_with_tools += sum(chat.with_tools for chat in chats)
    return [chat.segments for chat in chats]


def chat_totals(counts: ReadCounts, options: PackOptions) -> dict[str, int]:
    """What a chat run's manifest totals (and ``stats``) count of its chats: the messages holding special-token
    text, and, where ``--tools-field`` names a field other than the default, the records holding tools there (none
    is then a warning: a mistyped field would render every chat without its tools). A run of other records: {}."""
    if options.messages_field is None:
        return {}
    totals = {"special_text_messages": counts.special_text_messages}
    if options.tools_field not in ("", DEFAULT_TOOLS_FIELD):
        totals["records_with_tools"] = counts.records_with_tools
    return totals


def ended_at_eos(segments: list[Segment], eos_token: str) -> list[Segment]:
    """``segments`` without the whitespace rendered after their closing ``eos_token``, if they close with one.

    Example: [..., "Hello<|im_end|>\\n"] with EOS ``<|im_end|>`` -> [..., "Hello<|im_end|>"].
    """
    end = len(segments)
    while end and not blank_stripped(segments[end - 1].text):
        end -= 1
    if not end:
        return segments
    last = segments[end - 1]
    closed = blank_stripped(last.text)
    if (end == len(segments) and closed == last.text) or not closed.endswith(eos_token):
        return segments
    return [*segments[: end - 1], replace(last, text=closed)]


def blank_stripped(text: str) -> str:
    """``text`` without the blank characters it ends with: Unicode whitespace and format characters (category Cf:
    a zero-width space U+200B, a byte order mark U+FEFF, a word joiner U+2060), which render as nothing.

    Example: "Hello<|im_end|>\\n\\u200b" -> "Hello<|im_end|>".
    """
    end = len(text)
    while end and (text[end - 1].isspace() or unicodedata.category(text[end - 1]) == "Cf"):
        end -= 1
    return text[:end]


def _check_prompted(prompt: str, header: str, rendered: str, number: int) -> None:
    """Refuse an assistant turn (message ``number``) whose rendering, after the text before it, is not the
    generation prompt (``prompt``, ending in the ``header`` it adds) and then the turn: packcli supervises what the
    turn adds after that prompt, so it cannot find where the words begin. Where the text before the turn changes
    too, :func:`_check_prefix` says so instead."""
    before = prompt[: len(prompt) - len(header)]
    if rendered.startswith(before) and not rendered.startswith(prompt):
        begins = rendered[len(before) : len(prompt)]
        raise BadRecordError(
            f"the chat template's generation prompt {header!r} is not how it begins assistant message {number} "
            f"({begins!r}): packcli supervises what the turn renders after that prompt, so it cannot tell where its "
            "words begin; make add_generation_prompt render the assistant turn's own opening"
        )


def _check_prefix(done: str, rendered: str) -> None:
    if not rendered.startswith(done):
        raise BadRecordError("chat template output changes earlier turns as turns are added; cannot mark turns")


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    """JSON as ``apply_chat_template`` renders it (its own ``tojson``): keys in their order, no HTML escapes (Jinja's
    built-in sorts keys and writes ``<`` as ``\\u003c``), so a tool list or call is the text the model is served."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise BadRecordError(f"chat template raised: {message}")
