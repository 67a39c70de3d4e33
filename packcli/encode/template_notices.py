"""What pack says once a run about its chat template, from a two-turn chat set-up renders (the probe): whitespace
the template renders after the EOS a chat ends with, and assistant headers that take loss (a template without an
add_generation_prompt branch)."""

from __future__ import annotations

from packcli.encode.chat import ChatML, JinjaTemplate, Tools, blank_stripped
from packcli.errors import BadRecordError, DataLossNotice

__all__ = ["PROBE", "template_notices"]

PROBE = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


def template_notices(template: ChatML | JinjaTemplate, loss_on_all: bool, eos_token: str | None) -> list[str]:
    """The notices for ``template`` (``loss_on_all``: ``--loss-on all``; ``eos_token``: the EOS pack appends, None:
    none), in the order said."""
    notices = (eos_notice(template, loss_on_all, eos_token), prompt_notice(template))
    return [notice for notice in notices if notice is not None]


def eos_notice(template: ChatML | JinjaTemplate, loss_on_all: bool, eos_token: str | None) -> str | None:
    """What pack says when the probe renders whitespace after the EOS it ends with, or None (the template does not,
    or cannot render the probe)."""
    try:
        probe = template.segments(PROBE, loss_on_all, template.probe_tools)
        rendered = "".join(segment.text for segment in probe)
    except BadRecordError:
        return None
    closed = blank_stripped(rendered)
    trailing = rendered[len(closed) :]
    if not eos_token or not trailing or not closed.endswith(eos_token):
        return None
    return (
        f"the chat template renders {trailing!r} after its EOS {eos_token}: each chat ends at that EOS, the "
        f"whitespace after it is dropped and no second EOS is appended"
    )


def prompt_notice(template: ChatML | JinjaTemplate) -> str | None:
    """What pack says (a :class:`DataLossNotice`: the headers take loss) when a Jinja template renders the probe's
    user turn alike with and without add_generation_prompt, and then an assistant turn that does not begin with its
    words: packcli cannot tell that header from the words, so it supervises the turn whole. Of named templates,
    each that a record may render with is checked ('default' without tools, 'tool_use' with), and the message names
    those at fault. None otherwise (a turn that is its words alone, Mistral's, has no header)."""
    if not isinstance(template, JinjaTemplate):
        return None
    probes = {"default": None, "tool_use": []} if template.tool_use is not None else {"": template.probe_tools}
    faulty = [name for name, tools in probes.items() if _headers_take_loss(template, tools)]
    if not faulty:
        return None
    which = " and ".join(repr(name) for name in faulty)
    named = f"chat template {which} renders" if faulty != [""] else "chat template renders"
    return DataLossNotice(
        f"the {named} nothing for add_generation_prompt, so each assistant turn is supervised whole, header "
        "included: give the template an add_generation_prompt branch that renders the assistant's header, so "
        "that the words alone take loss"
    )


def _headers_take_loss(template: JinjaTemplate, tools: Tools) -> bool:
    """Whether ``template``, given ``tools``, renders the probe's user turn alike with and without
    add_generation_prompt and then an assistant turn that does not begin with its words (False where it cannot
    render the probe: a 'default' that is missing, a template that wants another chat)."""
    try:
        asked = template.render(PROBE[:1], True, tools)
        plain = template.render(PROBE[:1], False, tools)
        answered = template.render(PROBE, False, tools)
    except BadRecordError:
        return False
    turn = answered.removeprefix(plain)
    return not (asked != plain or turn == answered or turn.lstrip().startswith(PROBE[1]["content"]))
