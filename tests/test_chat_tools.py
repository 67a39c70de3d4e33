"""A chat record's tool definitions (``--tools-field``, default ``tools``) reach the chat template as ``tools``, as
``apply_chat_template(messages, tools=...)`` passes them: Qwen2.5-Instruct's tools branch renders them into the
system turn. With the real Qwen tokenizer and Qwen2.5-Instruct's tool template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import error_line, shared_path, write_jsonl
from test_chat_records import last_line
from test_sft import IM_END, packed_documents
from typer.testing import CliRunner

from packcli.cli import app
from packcli.encode.tokenizer import load_tokenizer

runner = CliRunner()

# Qwen2.5-Instruct's chat template, tools branch included (its tokenizer_config.json's `chat_template`).
QWEN25_TOOLS_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided \
with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\
\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or \
(message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city, in °C (<city> & country).",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
WITH_TOOLS = {
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "content": '{"celsius": 12}'},
        {"role": "assistant", "content": "12 C in Paris."},
    ],
    "tools": [WEATHER],
}
WITHOUT_TOOLS = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}


def qwen25_tools(directory: Path) -> Path:
    """A Qwen2.5-Instruct tokenizer directory: the shared Qwen tokenizer.json, EOS `<|im_end|>`, the tool template."""
    directory.mkdir()
    (directory / "tokenizer.json").write_bytes(shared_path("tokenizers/qwen/tokenizer.json").read_bytes())
    config = {"eos_token": "<|im_end|>", "chat_template": QWEN25_TOOLS_TEMPLATE}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def pack(tmp_path: Path, records: list[Any], *flags: str, out: str = "o") -> Any:
    model = tmp_path / "qwen2.5-instruct"
    if not model.exists():
        qwen25_tools(model)
    path = write_jsonl(tmp_path / "chats.jsonl", records)
    args = ["pack", str(path), "--messages-field", "messages", "--tokenizer", str(model), "--out", str(tmp_path / out)]
    return runner.invoke(app, [*args, "--no-shuffle", "--max-len", "1024", *flags])


def test_tools_reach_the_template_as_apply_chat_template_passes_them(tmp_path: Path) -> None:
    """The packed tokens of a record with tools are `apply_chat_template(messages, tools=tools, tokenize=True)`'s,
    up to the EOS rule (the chat ends at its last `<|im_end|>`, the `\\n` after it dropped): the tool list is in
    them. A record without tools is packed as without the option."""
    transformers = pytest.importorskip("transformers")
    result = pack(tmp_path, [WITH_TOOLS, WITHOUT_TOOLS])
    assert result.exit_code == 0, result.output
    documents = sorted(packed_documents(tmp_path / "o"), key=lambda document: -len(document[0]))
    reference = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tmp_path / "qwen2.5-instruct" / "tokenizer.json"), chat_template=QWEN25_TOOLS_TEMPLATE
    )
    qwen = load_tokenizer(str(tmp_path / "qwen2.5-instruct")).tokenizer
    for (ids, _), record in zip(documents, (WITH_TOOLS, WITHOUT_TOOLS)):
        messages, tools = record["messages"], record.get("tools")
        expected = reference.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=False)
        assert reference.decode(expected[-2:]) == "<|im_end|>\n"
        assert ids == expected[:-1] and ids[-1] == IM_END
    text = qwen.decode(documents[0][0], skip_special_tokens=False)
    assert "<tools>\n" + json.dumps(WEATHER, ensure_ascii=False) + "\n</tools>" in text
    supervised = qwen.decode([label for label in documents[0][1] if label != -100], skip_special_tokens=False)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in supervised
    assert "<tools>" not in supervised


def test_an_empty_tools_field_leaves_the_tools_out(tmp_path: Path) -> None:
    """`--tools-field ''` packs the record as before the option (no tool list), under a new fingerprint; `stats` of
    the raw corpus counts the tokens pack writes, with and without the tools."""
    with_tools = pack(tmp_path, [WITH_TOOLS])
    without = pack(tmp_path, [WITH_TOOLS], "--tools-field", "", out="off")
    assert with_tools.exit_code == 0 and without.exit_code == 0, without.output
    [(ids, _)] = packed_documents(tmp_path / "off")
    assert "<tools>" not in load_tokenizer(str(tmp_path / "qwen2.5-instruct")).tokenizer.decode(ids)
    manifests = [json.loads((tmp_path / out / "manifest.json").read_text()) for out in ("o", "off")]
    assert [manifest["options"]["tools_field"] for manifest in manifests] == ["tools", ""]
    assert manifests[0]["fingerprint"] != manifests[1]["fingerprint"]
    model, chats = str(tmp_path / "qwen2.5-instruct"), str(tmp_path / "chats.jsonl")
    for manifest, flags in zip(manifests, ([], ["--tools-field", ""])):  # stats reads the tools as pack does
        args = ["stats", chats, "--messages-field", "messages", "--tokenizer", model, "--max-len", "1024", "--json"]
        stats = runner.invoke(app, [*args, *flags])
        assert json.loads(stats.stdout)["input_tokens"] == manifest["totals"]["tokens"], stats.output


def test_a_text_run_has_no_tools_field_and_it_needs_chats(tmp_path: Path) -> None:
    """Only chats read tools: a text output's manifest is as before the option; naming a tools field for any other
    records is a usage error."""
    path = write_jsonl(tmp_path / "docs.jsonl", [{"text": "plain text"}])
    result = runner.invoke(app, ["pack", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "tools_field" not in json.loads((tmp_path / "o" / "manifest.json").read_text())["options"]
    refused = runner.invoke(app, ["pack", str(path), "--tools-field", "functions", "--out", str(tmp_path / "p")])
    assert refused.exit_code == 2 and "--tools-field needs --messages-field" in error_line(refused.stderr)


@pytest.mark.parametrize(
    ("tools", "said"),
    [("get_weather", "is a string, not a list of tool"), ([WEATHER, "f"], "is an array holding a string, not a list")],
)
def test_tools_that_are_not_a_list_of_objects_are_a_bad_record(tmp_path: Path, tools: Any, said: str) -> None:
    """A tools value that is not a list of objects is a bad record, named by file and line (or counted and
    skipped with --skip-bad-records); null is a record without tools."""
    records = [WITHOUT_TOOLS, {**WITHOUT_TOOLS, "tools": tools}, {**WITHOUT_TOOLS, "tools": None}]
    failed = pack(tmp_path, records)
    assert failed.exit_code == 1
    assert f"chats.jsonl:2: field 'tools' {said}" in last_line(failed.stderr)
    skipped = pack(tmp_path, records, "--skip-bad-records", out="s")
    assert skipped.exit_code == 0, skipped.output
    totals = json.loads((tmp_path / "s" / "manifest.json").read_text())["totals"]
    assert (totals["bad_records"], totals["documents"]) == (1, 2)


def test_the_built_in_chatml_refuses_tools_in_one_line(tmp_path: Path) -> None:
    """The built-in ChatML renders no tools: a record carrying them is one error line, never a silent drop;
    `--tools-field ''` packs it without them, and a record without tools packs as before."""
    record = {**WITHOUT_TOOLS, "tools": [WEATHER]}
    path = write_jsonl(tmp_path / "chats.jsonl", [WITHOUT_TOOLS, record])
    args = ["pack", str(path), "--messages-field", "messages", "--out"]
    failed = runner.invoke(app, [*args, str(tmp_path / "o")])
    assert failed.exit_code == 1
    line = last_line(failed.stderr)
    assert "chats.jsonl:2: record has 1 tool definition(s), which the built-in ChatML cannot render" in line
    assert "--chat-template" in line and "--tools-field ''" in line
    left_out = runner.invoke(app, [*args, str(tmp_path / "p"), "--tools-field", ""])
    assert left_out.exit_code == 0, left_out.output


def test_a_dataset_s_tools_column_reaches_the_template_as_a_file_s_tools_do(tmp_path: Path) -> None:
    """`packcli.pack(dataset, messages_field=...)` reads the dataset's `tools` column (a row without tools: None)
    and writes the shards the same records in a file give; `tools_field=""` leaves the tools out."""
    datasets = pytest.importorskip("datasets")
    import packcli

    assert pack(tmp_path, [WITH_TOOLS, WITHOUT_TOOLS]).exit_code == 0
    dataset = datasets.Dataset.from_list([WITH_TOOLS, WITHOUT_TOOLS])
    options = {"messages_field": "messages", "tokenizer": str(tmp_path / "qwen2.5-instruct"), "shuffle": False}
    packcli.pack(dataset, max_len=1024, out=tmp_path / "api", **options)
    packcli.pack(dataset, max_len=1024, out=tmp_path / "off", tools_field="", **options)
    shards = [
        [shard["sha256"] for shard in json.loads((tmp_path / out / "manifest.json").read_text())["shards"]]
        for out in ("o", "api", "off")
    ]
    assert shards[0] == shards[1] != shards[2]


def test_a_tools_field_no_record_holds_is_a_warning_in_pack_stats_and_the_python_api(tmp_path: Path) -> None:
    """A mistyped `--tools-field` renders every chat without its tools: pack (one process and partitions), stats of
    the raw corpus and `packcli.pack()` say so, and the manifest counts the records that held tools there. The
    default field, which most corpora lack, is no warning."""
    import packcli
    from packcli.errors import PackcliDataLossWarning

    renamed = {"messages": WITH_TOOLS["messages"], "functions": [WEATHER]}
    records = [renamed, WITHOUT_TOOLS, WITHOUT_TOOLS]
    warned = "no record holds tool definitions in the field 'nope' that --tools-field names"
    for out, flags in (("o", []), ("p", ["--partitions", "2", "--quiet"])):  # said even with --quiet
        typo = pack(tmp_path, records, "--tools-field", "nope", *flags, out=out)
        assert typo.exit_code == 0, typo.output
        assert warned in typo.stderr
        assert json.loads((tmp_path / out / "manifest.json").read_text())["totals"]["records_with_tools"] == 0
    named = pack(tmp_path, records, "--tools-field", "functions", out="named")
    assert named.exit_code == 0 and "--tools-field names" not in named.stderr, named.output
    assert json.loads((tmp_path / "named" / "manifest.json").read_text())["totals"]["records_with_tools"] == 1
    default = pack(tmp_path, [WITHOUT_TOOLS], out="default")
    assert default.exit_code == 0 and "--tools-field names" not in default.stderr, default.output
    assert "records_with_tools" not in json.loads((tmp_path / "default" / "manifest.json").read_text())["totals"]
    model, chats = str(tmp_path / "qwen2.5-instruct"), str(tmp_path / "chats.jsonl")
    stats = runner.invoke(
        app, ["stats", chats, "--messages-field", "messages", "--tokenizer", model, "--tools-field", "nope", "--json"]
    )
    assert stats.exit_code == 0 and warned in stats.stderr, stats.output
    assert json.loads(stats.stdout)["records_with_tools"] == 0
    with pytest.warns(PackcliDataLossWarning, match="in the field 'nope' that tools_field names"):
        packcli.pack(
            chats, max_len=1024, out=tmp_path / "api", messages_field="messages", tokenizer=model, tools_field="nope"
        )


def named_templates(tmp_path: Path, templates: dict[str, str]) -> Any:
    """A Qwen2.5-Instruct tokenizer directory (where :func:`pack` looks) whose tokenizer_config.json holds
    ``templates`` as a list of named templates, as transformers saves several; and transformers' tokenizer with
    them, the reference."""
    transformers = pytest.importorskip("transformers")
    model = qwen25_tools(tmp_path / "qwen2.5-instruct")
    named = [{"name": name, "template": template} for name, template in templates.items()]
    (model / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "chat_template": named}))
    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(model / "tokenizer.json"), chat_template=templates)


def assert_templates_picked_as(reference: Any, tmp_path: Path) -> None:
    """Pack a record with tools and one without (named templates 'tool_use' and a 'default' that says "You are
    Default"): each packs as ``reference``'s apply_chat_template renders it, up to the EOS rule, each with its own
    template."""
    result = pack(tmp_path, [WITH_TOOLS, WITHOUT_TOOLS])
    assert result.exit_code == 0, result.output
    documents = sorted(packed_documents(tmp_path / "o"), key=lambda document: -len(document[0]))
    for (ids, _), record, system in zip(documents, (WITH_TOOLS, WITHOUT_TOOLS), ("You are Qwen", "You are Default")):
        expected = reference.apply_chat_template(
            record["messages"], tools=record.get("tools"), tokenize=True, return_dict=False
        )
        assert ids == expected[:-1] and system in reference.decode(ids), reference.decode(ids)


def test_a_record_with_tools_takes_the_tool_use_template_as_apply_chat_template_does(tmp_path: Path) -> None:
    """Of named templates 'default' and 'tool_use', a record with tools renders with 'tool_use' and one without
    with 'default', as apply_chat_template picks them: the tokens are its own (up to the EOS rule). packcli took
    'default' for every record."""
    default = QWEN25_TOOLS_TEMPLATE.replace("You are Qwen", "You are Default")
    reference = named_templates(tmp_path, {"default": default, "tool_use": QWEN25_TOOLS_TEMPLATE})
    assert_templates_picked_as(reference, tmp_path)


def test_a_tool_use_template_without_a_default_renders_records_with_tools(tmp_path: Path) -> None:
    """Named templates holding 'tool_use' and no 'default' render a record with tools, as apply_chat_template
    does; a record without tools, which apply_chat_template cannot render either, is a bad record saying there is
    no default template (counted and skipped with --skip-bad-records). The whole config was refused."""
    reference = named_templates(tmp_path, {"tool_use": QWEN25_TOOLS_TEMPLATE})
    with pytest.raises(ValueError, match="no default"):
        reference.apply_chat_template(WITHOUT_TOOLS["messages"], tokenize=False)
    failed = pack(tmp_path, [WITH_TOOLS, WITHOUT_TOOLS])
    assert failed.exit_code == 1
    assert "chats.jsonl:2: no default chat template: " in last_line(failed.stderr), failed.stderr
    skipped = pack(tmp_path, [WITH_TOOLS, WITHOUT_TOOLS], "--skip-bad-records", out="s")
    assert skipped.exit_code == 0, skipped.output
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["totals"]["bad_records"] == 1
    [(ids, _)] = packed_documents(tmp_path / "s")
    expected = reference.apply_chat_template(
        WITH_TOOLS["messages"], tools=WITH_TOOLS["tools"], tokenize=True, return_dict=False
    )
    assert ids == expected[:-1]


def test_templates_saved_as_files_are_taken_as_apply_chat_template_takes_them(tmp_path: Path) -> None:
    """transformers saves named templates as files: `chat_template.jinja` (the default) and
    `additional_chat_templates/NAME.jinja`, which replace the config's template when it loads them. A record with tools
    renders with 'tool_use', one without with the default, token for token as AutoTokenizer's apply_chat_template;
    packcli read only `chat_template.jinja` and rendered every record with it."""
    transformers = pytest.importorskip("transformers")
    default = QWEN25_TOOLS_TEMPLATE.replace("You are Qwen", "You are Default")
    named_templates(tmp_path, {"default": default, "tool_use": QWEN25_TOOLS_TEMPLATE})
    model = tmp_path / "qwen2.5-instruct"
    transformers.AutoTokenizer.from_pretrained(str(model)).save_pretrained(str(model))
    assert (model / "additional_chat_templates" / "tool_use.jinja").is_file()
    assert "chat_template" not in json.loads((model / "tokenizer_config.json").read_text())
    reference = transformers.AutoTokenizer.from_pretrained(str(model))
    assert_templates_picked_as(reference, tmp_path)


def test_the_generation_prompt_warning_checks_each_named_template(tmp_path: Path) -> None:
    """The warning for a template with no add_generation_prompt branch (each assistant header then takes loss) checks
    every named template a record may render with, naming the one at fault: it checked the default alone, so a
    'tool_use' without the branch, which renders every record with tools, passed unsaid."""
    branch = "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"
    assert branch in QWEN25_TOOLS_TEMPLATE
    without = QWEN25_TOOLS_TEMPLATE.replace(branch, "")
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    named_templates(tmp_path / "a", {"default": QWEN25_TOOLS_TEMPLATE, "tool_use": without})
    result = pack(tmp_path / "a", [WITH_TOOLS], "--quiet")
    assert result.exit_code == 0, result.output
    assert "warning: the chat template 'tool_use' renders nothing for add_generation_prompt" in result.stderr
    named_templates(tmp_path / "b", {"default": QWEN25_TOOLS_TEMPLATE, "tool_use": QWEN25_TOOLS_TEMPLATE})
    fine = pack(tmp_path / "b", [WITH_TOOLS], "--quiet")
    assert fine.exit_code == 0 and "add_generation_prompt" not in fine.stderr, fine.stderr
