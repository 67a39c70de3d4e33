"""Which chat template a run renders: the ``--chat-template`` file, else the one the tokenizer's
``tokenizer_config.json`` (or ``chat_template.jinja``) configures, as ``apply_chat_template`` takes it (of named
templates, "tool_use" for a record with tools, else "default"), else the built-in ChatML. A configured template
``apply_chat_template`` could not use is refused, never passed over."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from packcli.encode.chat import CHATML_MARKERS, ChatML, JinjaTemplate
from packcli.encode.tokenizer import LoadedTokenizer, refuse_byte_order_mark, template_text
from packcli.errors import PackcliError, UsageError, option
from packcli.read.fields import json_kind

__all__ = ["load_template"]


def load_template(
    path: str | None, tokenizer: LoadedTokenizer, warn: Callable[[str], None], source: str | None = None
) -> ChatML | JinjaTemplate:
    """The template for chat records: ``--chat-template`` file, else the one in the tokenizer's
    ``tokenizer_config.json``, else ChatML (with a warning when the tokenizer lacks its markers as special tokens).
    ``source``: the ``--chat-template`` file's text as the driver read it (a worker then never opens ``path``)."""
    bos = tokenizer.facts.id_to_token(tokenizer.bos_id) if tokenizer.bos_id is not None else None
    eos = tokenizer.facts.id_to_token(tokenizer.eos_id) if tokenizer.eos_id is not None else None
    if path is not None:
        file = Path(path)
        if source is None:
            if not file.is_file():
                raise UsageError(f"{option('chat_template', path)}: no such file")
            source = template_text(file.read_bytes(), path)
        return JinjaTemplate(source, str(file), bos or "", eos or "")
    configured = _configured_templates(tokenizer.config.get("chat_template"), tokenizer.config_path)
    if configured is not None:
        default, tool_use = configured
        for template in (default, tool_use):
            if template is not None:
                refuse_byte_order_mark(template, tokenizer.config_path, "chat_template")
        name = f"{tokenizer.name} tokenizer_config.json"
        return JinjaTemplate(default, name, bos or "", eos or "", tool_use=tool_use)
    missing = [marker for marker in CHATML_MARKERS if not tokenizer.is_special(marker)]
    if missing:
        warn(
            f"built-in ChatML with tokenizer {tokenizer.name}, which lacks {' and '.join(missing)} as special "
            f"tokens: the markup is tokenized as plain text (pass {option('chat_template')} for this model's own "
            "format)"
        )
    return ChatML()


def _configured_templates(value: object, config_path: str | None) -> tuple[str | None, str | None] | None:
    """A config's ``chat_template`` as (default, tool_use): a string is the default; a list of named templates gives
    its entries named "default" and "tool_use" (``apply_chat_template`` renders a chat with tools with "tool_use"
    where there is one, else with "default"); None where the config has none. Anything else, or a list holding
    neither, is a data error naming ``config_path``, as ``apply_chat_template`` fails on it rather than fall back
    to another template."""
    if value is None or isinstance(value, str):
        return None if value is None else (value, None)
    fix = f"fix it, or pass {option('chat_template')}"
    if not isinstance(value, list) or not all(_named_template(entry) for entry in value):
        what = (
            "an array holding something other than"
            if isinstance(value, list)
            else f"{json_kind(value)}, not a template (a string) nor a list of"
        )
        raise PackcliError(
            f'chat_template is {what} named templates ({{"name": ..., "template": ...}}): {fix}', config_path
        )
    named = {entry["name"]: entry["template"] for entry in value}
    if "default" not in named and "tool_use" not in named:
        raise PackcliError(
            f"chat_template names no template 'default' nor 'tool_use' (it names "
            f"{', '.join(map(repr, named)) or 'none'}), the ones apply_chat_template renders without a name: {fix}",
            config_path,
        )
    return named.get("default"), named.get("tool_use")


def _named_template(entry: object) -> bool:
    """Whether ``entry`` is one of a config's named templates: ``{"name": ..., "template": ...}``, both strings."""
    return isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("template"), str)
