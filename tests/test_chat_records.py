"""Chat records at the edges: what the template never renders is not counted, invisible text after the EOS is the
document's end, tool-call messages without content reach the template, and a raw-corpus ``stats`` counts
special-token text as ``pack`` does. With the real Qwen tokenizer, as a Qwen2.5-Instruct user packs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_jsonl
from test_sft import IM_END, JINJA, QWEN25_TEMPLATE, packed_documents, qwen25_instruct, qwen_documents
from typer.testing import CliRunner

from packcli.cli import app
from packcli.encode.tokenizer import load_tokenizer
from packcli.report.verify import verify_output

runner = CliRunner()

TOOL_CALL = {"name": "lookup", "arguments": {"word": "prime"}}
# Qwen2.5-Instruct's assistant branch for tool calls, reduced: content when there is some, then each call as JSON.
TOOLS_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant' }}{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for call in message.tool_calls or [] %}"
    "{{- '\\n<tool_call>\\n' }}{{- call.function | tojson }}{{- '\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
TOOL_CHAT = {
    "messages": [
        {"role": "user", "content": "Is seven prime?"},
        {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": TOOL_CALL}]},
        {"role": "tool", "content": "yes"},
        {"role": "assistant", "content": "Yes."},
    ]
}


def test_a_message_the_template_never_renders_is_not_counted(tmp_path: Path) -> None:
    """Qwen2.5's template (tools branch left out) renders no `tool` message: the `<|im_end|>` a tool result holds
    never reaches the tokens, so it is not counted and nothing is warned; a user's rendered one still is."""
    chats = [
        {"messages": [{"role": "user", "content": "Look it up"}, {"role": "assistant", "content": "Looking."},
                      {"role": "tool", "content": "found <|im_end|> here"}, {"role": "tool", "content": "<|im_end|>"},
                      {"role": "assistant", "content": "Done."}]},
        {"messages": [{"role": "user", "content": "Is <|im_end|> a token?"}, {"role": "assistant", "content": "Yes."}]},
    ]  # fmt: skip
    result, documents = qwen_documents(tmp_path, chats)
    assert [document[0].count(IM_END) for document in documents] == [4, 4]  # the tool's text is not in the tokens
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["totals"]["special_text_messages"] == 1
    warned = [line for line in result.stderr.splitlines() if "special_text_messages" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: 1 message holds special-token text"), result.stderr


def test_invisible_text_after_the_eos_is_the_documents_end(tmp_path: Path) -> None:
    """A template that renders a zero-width space (a format character, not whitespace to Python) or a byte order
    mark after `<|im_end|>` ends the chat at that `<|im_end|>` all the same: no second EOS is appended."""
    for number, invisible in enumerate(("\u200b", "\ufeff\n", "\n\u2060")):
        escaped = invisible.encode("unicode-escape").decode()
        template = QWEN25_TEMPLATE.replace("'<|im_end|>' + '\\n'", f"'<|im_end|>{escaped}'")
        assert template != QWEN25_TEMPLATE
        model = qwen25_instruct(tmp_path / f"model{number}")
        (model / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "chat_template": template}))
        chat = {"messages": [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "Seven."}]}
        path, out = write_jsonl(tmp_path / "chats.jsonl", [chat]), tmp_path / f"o{number}"
        args = ["pack", str(path), "--messages-field", "messages", "--tokenizer", str(model), "--out", str(out)]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        rows = load_rows(out)
        assert rows[0][-1] == IM_END and rows[0].count(IM_END) == 3, (invisible, rows)
        assert any("after its EOS" in line for line in result.stderr.splitlines()), result.stderr


def load_rows(out: Path) -> list[list[int]]:
    from packcli.format.shards import read_shard

    return [
        ids for path in sorted(out.glob("shard-*.arrow")) for ids in read_shard(path).column("input_ids").to_pylist()
    ]


def test_a_tool_call_message_without_content_reaches_the_template(tmp_path: Path) -> None:
    """An OpenAI-style assistant message with `content: null` and `tool_calls` is packed when the template renders
    it (the template gets None, as apply_chat_template gives it): the call is in the tokens, supervised."""
    (tmp_path / "tools.jinja").write_text(TOOLS_TEMPLATE)
    qwen = load_tokenizer(str(qwen25_instruct(tmp_path / "qwen"))).tokenizer
    _, documents = qwen_documents(tmp_path, [TOOL_CHAT], "--chat-template", str(tmp_path / "tools.jinja"))
    [(ids, labels)] = documents
    call = '<tool_call>\n{"name": "lookup", "arguments": {"word": "prime"}}\n</tool_call>'  # as HF's tojson
    assert f"<|im_start|>assistant\n{call}<|im_end|>" in qwen.decode(ids, skip_special_tokens=False)
    assert call in qwen.decode([i for i in labels if i != -100], skip_special_tokens=False)
    assert verify_output(tmp_path / "o").ok


def test_a_template_that_cannot_render_null_content_is_one_line(tmp_path: Path) -> None:
    """Where the template itself fails on None (it adds content to a string) the record is bad, in one line naming
    file and line; the built-in ChatML, which renders no tool calls, says so rather than drop them."""
    model = qwen25_instruct(tmp_path / "qwen")
    path = write_jsonl(tmp_path / "chats.jsonl", [{"messages": [{"role": "user", "content": "Hi"}]}, TOOL_CHAT])
    args = ["pack", str(path), "--messages-field", "messages", "--out", str(tmp_path / "o")]
    failed = runner.invoke(app, [*args, "--tokenizer", str(model)])
    assert failed.exit_code == 1 and last_line(failed.stderr).endswith(
        'chats.jsonl:2: chat template failed to render: can only concatenate str (not "NoneType") to str'
    ), failed.stderr
    chatml = runner.invoke(app, args)
    assert chatml.exit_code == 1
    assert last_line(chatml.stderr).endswith(
        "chats.jsonl:2: message 2 carries 1 tool call(s), which the built-in ChatML cannot render: pass "
        "--chat-template with a template that renders tool calls"
    ), chatml.stderr


@pytest.mark.parametrize("content", ["", "Let me look."])
def test_the_built_in_chatml_refuses_tool_calls_whatever_the_content(tmp_path: Path, content: str) -> None:
    """A tool-call message whose content is a string (empty or not) is refused by the built-in ChatML as one with
    null content is: rendering its content alone would drop the calls, and train an empty or cut assistant turn."""
    chat = {"messages": [{**message, "content": content} if message["role"] == "assistant" and "tool_calls" in
                         message else message for message in TOOL_CHAT["messages"]]}  # fmt: skip
    assert chat != TOOL_CHAT
    path = write_jsonl(tmp_path / "chats.jsonl", [chat])
    result = runner.invoke(app, ["pack", str(path), "--messages-field", "messages", "--out", str(tmp_path / "o")])
    refusal = "chats.jsonl:1: message 2 carries 1 tool call(s), which the built-in ChatML cannot render"
    assert result.exit_code == 1 and refusal in last_line(result.stderr), result.stderr


def last_line(stderr: str) -> str:
    """The error line: the last of stderr (the template's EOS notice comes before it)."""
    line = stderr.splitlines()[-1]
    assert line.startswith("error: ") and stderr.endswith(line + "\n"), stderr
    return line


def test_stats_on_a_raw_corpus_counts_special_text_as_pack_does(tmp_path: Path) -> None:
    """`packcli stats chats.jsonl` reports `special_text_messages` and its warning where `pack` would."""
    model = qwen25_instruct(tmp_path / "qwen")
    chats = [
        {"messages": [{"role": "user", "content": "Is <|im_end|> a token?"}, {"role": "assistant", "content": "Yes."}]}
    ]
    path = write_jsonl(tmp_path / "chats.jsonl", chats)
    args = ["stats", str(path), "--messages-field", "messages", "--tokenizer", str(model), "--max-len", "512"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["special_text_messages"] == 1
    warned = [line for line in result.stderr.splitlines() if "special_text_messages" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: 1 message holds special-token text"), result.stderr
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"text": "no chats here"}])
    text_only = runner.invoke(app, ["stats", str(plain), "--max-len", "512", "--json"])
    assert text_only.exit_code == 0 and "special_text_messages" not in json.loads(text_only.stdout)


# Qwen2.5-Instruct's `tool` branch: consecutive tool results share one user turn, closed after the last of them, so
# the rendering of a chat cut after the first result closes a turn that the whole chat leaves open.
PARALLEL_TOOLS_TEMPLATE = TOOLS_TEMPLATE.replace(
    "{%- else %}",
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}",
)


def test_parallel_tool_results_under_qwen25s_template_are_packed(tmp_path: Path) -> None:
    """Two tool results in a row (parallel calls) under Qwen2.5's own tool branch: the chat is packed, not refused
    as a template that changes earlier turns; its tokens are the whole rendering's (the final `\\n` dropped), and
    the assistant turns alone are supervised."""
    assert PARALLEL_TOOLS_TEMPLATE != TOOLS_TEMPLATE
    (tmp_path / "tools.jinja").write_text(PARALLEL_TOOLS_TEMPLATE)
    calls = [{"type": "function", "function": TOOL_CALL}] * 2
    chat = {
        "messages": [
            {"role": "user", "content": "Are seven and nine prime?"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "content": "yes"},
            {"role": "tool", "content": "no"},
            {"role": "assistant", "content": "Seven is."},
        ]
    }
    qwen = load_tokenizer(str(qwen25_instruct(tmp_path / "qwen"))).tokenizer
    _, documents = qwen_documents(tmp_path, [chat], "--chat-template", str(tmp_path / "tools.jinja"))
    [(ids, labels)] = documents
    results = (
        "<|im_start|>user\n<tool_response>\nyes\n</tool_response>\n<tool_response>\nno\n</tool_response><|im_end|>"
    )
    text = qwen.decode(ids, skip_special_tokens=False)
    assert results in text and text.endswith("<|im_start|>assistant\nSeven is.<|im_end|>"), text
    supervised = qwen.decode([i for i in labels if i != -100], skip_special_tokens=False)
    assert "tool_response" not in supervised and supervised.endswith("Seven is.<|im_end|>"), supervised
    assert verify_output(tmp_path / "o").ok


def test_a_chat_template_jinja_file_beside_the_tokenizer_is_the_template(tmp_path: Path) -> None:
    """A hub snapshot saved by a recent transformers keeps its template in `chat_template.jinja`, not in
    tokenizer_config.json: pack renders with it (here the Qwen2.5 default system prompt appears), as
    apply_chat_template does, rather than fall back to the built-in ChatML; an edited file makes a new fingerprint."""
    model = qwen25_instruct(tmp_path / "qwen")
    (model / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    (model / "chat_template.jinja").write_text(QWEN25_TEMPLATE)
    chat = {"messages": [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "Seven."}]}
    path, out = write_jsonl(tmp_path / "chats.jsonl", [chat]), tmp_path / "o"
    args = ["pack", str(path), "--messages-field", "messages", "--tokenizer", str(model), "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    qwen = load_tokenizer(str(model)).tokenizer
    assert qwen.decode(load_rows(out)[0], skip_special_tokens=False).startswith(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud."
    )
    fingerprint = json.loads((out / "manifest.json").read_text())["fingerprint"]
    (model / "chat_template.jinja").write_text(QWEN25_TEMPLATE.replace("You are Qwen", "You are Q"))
    again = runner.invoke(app, [*args, "--overwrite"])
    assert again.exit_code == 0 and "up to date" not in again.stdout, again.output
    assert json.loads((out / "manifest.json").read_text())["fingerprint"] != fingerprint


NO_GENERATION_PROMPT = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def test_a_template_without_a_generation_prompt_is_warned_of_once(tmp_path: Path) -> None:
    """A template that renders nothing for add_generation_prompt leaves packcli no header to tell from the words:
    each assistant turn is supervised whole (here `<|im_start|>assistant\\n` too), which pack says once a run; the
    same template with a generation prompt supervises the words alone, and says nothing, as does one whose assistant
    turn is its words alone (Mistral's), which has no header to take loss."""
    chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    path = write_jsonl(tmp_path / "chats.jsonl", [chat, chat])
    qwen = load_tokenizer(str(qwen25_instruct(tmp_path / "qwen"))).tokenizer
    notice = "warning: the chat template renders nothing for add_generation_prompt"
    headless = (  # Mistral's way: the user turn closes with [/INST] and the assistant's words follow, no header
        "{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }} [/INST]{% else %} {{ m.content }}"
        "<|im_end|>{% endif %}{% endfor %}"
    )
    for name, template in [("plain", NO_GENERATION_PROMPT), ("prompted", JINJA), ("headless", headless)]:
        (tmp_path / f"{name}.jinja").write_text(template)
        out = tmp_path / name
        args = ["pack", str(path), "--messages-field", "messages", "--chat-template", str(tmp_path / f"{name}.jinja")]
        result = runner.invoke(app, [*args, "--tokenizer", str(tmp_path / "qwen"), "--out", str(out)])
        assert result.exit_code == 0, result.output
        supervised = {qwen.decode([i for i in labels if i != -100], False) for _, labels in packed_documents(out)}
        warned = [line for line in result.stderr.splitlines() if line.startswith(notice)]
        if name == "plain":
            assert supervised == {"<|im_start|>assistant\nHello<|im_end|>"} and len(warned) == 1, result.stderr
            assert "header included" in warned[0] and "add_generation_prompt branch" in warned[0]
        else:
            assert supervised == {"Hello<|im_end|>" if name == "prompted" else " Hello<|im_end|>"}, supervised
            assert not warned, result.stderr


def test_an_assistant_first_chat_the_template_cannot_prompt_says_why(tmp_path: Path) -> None:
    """Qwen2.5's template reads messages[0], so the empty chat before an assistant-first turn (rendered with
    add_generation_prompt to find where its words begin) fails: the error says that is what failed to render."""
    model = qwen25_instruct(tmp_path / "qwen")
    chat = {"messages": [{"role": "assistant", "content": "Hi there"}, {"role": "user", "content": "thanks"}]}
    path = write_jsonl(tmp_path / "chats.jsonl", [chat])
    args = ["pack", str(path), "--messages-field", "messages", "--tokenizer", str(model), "--out", str(tmp_path / "o")]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and last_line(result.stderr).endswith(
        "chats.jsonl:1: chat template failed to render the chat before its first assistant turn, which is message 1 "
        "(no messages: packcli renders what precedes each assistant turn, with add_generation_prompt, to find where "
        "its words begin): list object has no element 0"
    ), result.stderr


@pytest.mark.parametrize(
    "value,wrong",
    [
        (
            [{"name": "rag", "template": "{{ messages }}"}],
            "names no template 'default' nor 'tool_use' (it names 'rag')",
        ),
        (5, "is a number, not a template"),
        ([{"name": "default"}], "is an array holding something other than named templates"),
    ],
)
def test_an_unusable_chat_template_in_tokenizer_config_is_refused(tmp_path: Path, value: Any, wrong: str) -> None:
    """A tokenizer_config.json whose chat_template apply_chat_template cannot use (named templates without a
    'default' or a 'tool_use', a number) is refused before any record is read, naming the file: it fell back to the built-in
    ChatML silently. A run of text records, which renders no chat, is not refused."""
    model = qwen25_instruct(tmp_path / "qwen")
    (model / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "chat_template": value}))
    path = write_jsonl(tmp_path / "chats.jsonl", [{"messages": "not a list"}])  # a bad record, never reached
    args = ["pack", str(path), "--tokenizer", str(model), "--max-len", "64", "--out", str(tmp_path / "o")]
    result = runner.invoke(app, [*args, "--messages-field", "messages"])
    assert result.exit_code == 1, result.output
    assert last_line(result.stderr).startswith(f"error: {model / 'tokenizer_config.json'}: chat_template {wrong}")
    text = runner.invoke(app, [*args, "--text-field", "messages", "--skip-bad-records"])
    assert text.exit_code == 0, text.output


@pytest.mark.parametrize(
    "where,what",
    [("--chat-template", "chat template"), ("tokenizer_config.json", "tokenizer_config.json"),
     ("chat_template.jinja", "chat template")],
)  # fmt: skip
def test_a_template_file_that_is_not_utf8_is_named_with_the_byte(tmp_path: Path, where: str, what: str) -> None:
    """A chat template (or the tokenizer_config.json holding one) whose bytes are not UTF-8 is one line naming the
    file and the offset of its first bad byte, as a tokenizer.json that is not UTF-8 is; it was a bare
    UnicodeDecodeError for a --chat-template file."""
    model = qwen25_instruct(tmp_path / "qwen")
    latin, flags = tmp_path / "latin.jinja", []
    if where == "--chat-template":
        flags = ["--chat-template", str(latin)]
    else:
        latin = model / where
    latin.write_bytes(b'{"chat_template": "\xff"}' if where == "tokenizer_config.json" else b"\xff\xfe{{ x }}")
    path = write_jsonl(tmp_path / "chats.jsonl", [{"messages": [{"role": "user", "content": "Hi"}]}])
    args = ["pack", str(path), "--messages-field", "messages", "--tokenizer", str(model), "--out", str(tmp_path / "o")]
    result = runner.invoke(app, [*args, *flags])
    byte = 19 if where == "tokenizer_config.json" else 0
    assert result.exit_code == 1 and last_line(result.stderr) == (
        f"error: {latin}: not a valid {what}: not UTF-8 (invalid start byte at byte {byte})"
    ), result.stderr


def test_segments_are_tokenized_apart_so_no_token_merges_across_a_turns_header(tmp_path: Path) -> None:
    """Each segment is tokenized on its own (that is how labels get exact boundaries): an assistant's words opening
    with `\\n\\n` after a header ending `\\n` give `Ċ`, `ĊĊ`, where the whole rendered text (apply_chat_template's
    ids) gives `ĊĊĊ`; the supervised tokens begin at `ĊĊ`. docs/fine-tuning.md says so."""
    from tokenizers import Tokenizer

    chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "\n\nHello"}]}
    _, [(ids, labels)] = qwen_documents(tmp_path, [chat])
    whole = Tokenizer.from_file(str(tmp_path / "qwen2.5-instruct" / "tokenizer.json"))  # special tokens recognized
    text = whole.decode(ids, skip_special_tokens=False)
    assert text.endswith("<|im_start|>assistant\n\n\nHello<|im_end|>"), text
    assert [whole.id_to_token(i) for i in ids[-5:]] == ["assistant", "Ċ", "ĊĊ", "Hello", "<|im_end|>"]
    assert whole.encode(text, add_special_tokens=False).tokens[-4:] == ["assistant", "ĊĊĊ", "Hello", "<|im_end|>"]
    assert labels[-4:] == [-100, *ids[-3:]]


def test_a_generation_prompt_that_does_not_begin_the_assistant_turn_is_refused_for_that(tmp_path: Path) -> None:
    """A template whose add_generation_prompt renders `<|im_start|>assistant\\n` but whose assistant turn opens
    `<|im_start|>bot\\n` leaves packcli no place where the words begin: the record is refused, and the message
    names that cause; it said the template "changes earlier turns", which it does not."""
    renamed = NO_GENERATION_PROMPT.replace("{{ m.role }}", "{{ 'bot' if m.role == 'assistant' else m.role }}")
    (tmp_path / "bot.jinja").write_text(renamed + "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    path = write_jsonl(tmp_path / "chats.jsonl", [chat])
    args = ["pack", str(path), "--messages-field", "messages", "--chat-template", str(tmp_path / "bot.jinja")]
    result = runner.invoke(
        app, [*args, "--tokenizer", str(qwen25_instruct(tmp_path / "qwen")), "--out", str(tmp_path / "o")]
    )
    line = last_line(result.stderr)
    assert result.exit_code == 1 and "changes earlier turns" not in line, result.stderr
    assert (
        "chats.jsonl:1: the chat template's generation prompt '<|im_start|>assistant\\n' is not how it begins "
        "assistant message 2 ('<|im_start|>bot\\nHello<'):"
    ) in line, line


def test_a_text_pack_never_reads_the_chat_template_jinja_beside_the_tokenizer(tmp_path: Path) -> None:
    """A chat_template.jinja beside the tokenizer that is not UTF-8 stopped packs that render no chat: a text pack
    (and a raw-corpus `stats` of text) does not read it; a chat pack is still one line naming the file and byte."""
    model = qwen25_instruct(tmp_path / "qwen")
    (model / "chat_template.jinja").write_bytes(b"\xff\xfe{{ x }}")
    text = write_jsonl(tmp_path / "docs.jsonl", [{"text": "plain text"}])
    flags = ["--tokenizer", str(model), "--max-len", "64"]
    packed = runner.invoke(app, ["pack", str(text), *flags, "--out", str(tmp_path / "o")])
    assert packed.exit_code == 0, packed.output
    stats = runner.invoke(app, ["stats", str(text), *flags, "--json"])
    assert stats.exit_code == 0, stats.output
    chats = write_jsonl(tmp_path / "chats.jsonl", [{"messages": [{"role": "user", "content": "Hi"}]}])
    chat = runner.invoke(
        app, ["pack", str(chats), "--messages-field", "messages", *flags, "--out", str(tmp_path / "c")]
    )
    assert chat.exit_code == 1 and last_line(chat.stderr) == (
        f"error: {model / 'chat_template.jinja'}: not a valid chat template: not UTF-8 (invalid start byte at byte 0)"
    ), chat.stderr


@pytest.mark.parametrize("where", ["--chat-template", "chat_template.jinja"])
def test_a_template_file_opening_with_a_byte_order_mark_is_refused_naming_it(tmp_path: Path, where: str) -> None:
    """A template file saved with a UTF-8 byte order mark rendered U+FEFF as text at the start of every chat:
    it is refused in one line naming the file, a data error as a template that is not UTF-8 is, before any record is
    read (the record here is bad)."""
    model = qwen25_instruct(tmp_path / "qwen")
    marked = tmp_path / "marked.jinja" if where == "--chat-template" else model / where
    marked.write_bytes(b"\xef\xbb\xbf" + QWEN25_TEMPLATE.encode())
    flags = ["--chat-template", str(marked)] if where == "--chat-template" else []
    path = write_jsonl(tmp_path / "chats.jsonl", [{"messages": "not a list"}])
    args = ["pack", str(path), "--messages-field", "messages", "--tokenizer", str(model), "--out", str(tmp_path / "o")]
    result = runner.invoke(app, [*args, *flags])
    assert result.exit_code == 1 and last_line(result.stderr).startswith(
        f"error: {marked}: starts with a UTF-8 byte order mark, which the template would render as text"
    ), result.stderr


@pytest.mark.parametrize("named", [False, True])
def test_a_configured_template_opening_with_a_byte_order_mark_is_refused(tmp_path: Path, named: bool) -> None:
    """A byte order mark opening a tokenizer_config.json's chat_template (a string, or a named template's) was
    rendered as text before every chat, as one opening a template file was before it was refused: it is refused
    the same way, naming the config."""
    model = qwen25_instruct(tmp_path / "qwen")
    marked = "\ufeff" + QWEN25_TEMPLATE
    template: Any = [{"name": "default", "template": marked}] if named else marked
    (model / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "chat_template": template}))
    path = write_jsonl(tmp_path / "chats.jsonl", [{"messages": [{"role": "user", "content": "Hi"}]}])
    args = ["pack", str(path), "--messages-field", "messages", "--tokenizer", str(model), "--out", str(tmp_path / "o")]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and last_line(result.stderr).startswith(
        f"error: {model / 'tokenizer_config.json'}: chat_template starts with a UTF-8 byte order mark"
    ), result.stderr


def test_a_template_without_a_generation_prompt_is_said_under_quiet_and_to_python(tmp_path: Path) -> None:
    """Supervising each assistant's header is data trained wrongly, so its warning is said as a loss is: on stderr
    even with --quiet, and by `packcli.pack()` as a PackcliDataLossWarning (it said nothing there)."""
    import packcli
    from packcli.errors import PackcliDataLossWarning

    chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    path = write_jsonl(tmp_path / "chats.jsonl", [chat])
    (tmp_path / "plain.jinja").write_text(NO_GENERATION_PROMPT)
    model = qwen25_instruct(tmp_path / "qwen")
    flags = [
        "--messages-field",
        "messages",
        "--chat-template",
        str(tmp_path / "plain.jinja"),
        "--tokenizer",
        str(model),
    ]
    for given, stdin in ((str(path), None), ("-", path.read_text())):  # standard input's warnings are renamed
        out = str(tmp_path / ("o" if stdin is None else "stdin"))
        quiet = runner.invoke(app, ["pack", given, *flags, "--out", out, "--quiet"], input=stdin)
        assert quiet.exit_code == 0, quiet.output
        assert "warning: the chat template renders nothing for add_generation_prompt" in quiet.stderr, quiet.stderr
    options = {"messages_field": "messages", "chat_template": str(tmp_path / "plain.jinja"), "tokenizer": str(model)}
    with pytest.warns(PackcliDataLossWarning, match="renders nothing for add_generation_prompt"):
        packcli.pack(str(path), max_len=512, out=tmp_path / "api", **options)
