"""Record fields: what a valid value is, the message for each bad one, and how records are collected (and converted
while reading, so a conversion error names the record's line)."""

from __future__ import annotations

from typing import Any

import pytest

from packcli.errors import BadRecordError
from packcli.read.fields import Columns, Field, check_value, values_of

TEXT = Field("text")
CHAT = Field("messages", "messages", "--messages-field")


@pytest.mark.parametrize(
    "value,field,message",
    [
        (None, TEXT, "field 'text' is null"),
        (5, TEXT, "field 'text' is a number, not a string"),
        (["a"], TEXT, "field 'text' is an array, not a string"),
        ("a \ud800 b", TEXT, r"field 'text' holds a lone surrogate \(\\ud800 at character 3\)"),
        ("\udfff", TEXT, r"lone surrogate \(\\udfff at character 1\)"),
        ("hi", CHAT, "field 'messages' is a string, not a list of messages"),
        ([{"content": "x"}], CHAT, "message 1 of 'messages' has no role"),
        (["x"], CHAT, "message 1 of 'messages' has no role"),
        ([{"role": "bot", "content": "x"}], CHAT, "message 1 has unknown role 'bot' \\(known: system, user"),
        ([{"role": "user", "content": 1}], CHAT, "message 1 of 'messages' has no string content"),
        (
            [{"role": "system", "content": None}],
            CHAT,
            r"message 1 of 'messages' \(system\) has null content, which only an assistant message carrying "
            "tool_calls may have",
        ),
        (
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": None}],
            CHAT,
            r"message 2 .*\(assistant\)",
        ),
        ([{"role": "assistant", "content": None, "tool_calls": []}], CHAT, r"message 1 .*\(assistant\) has null"),
        ([{"role": "tool", "content": None, "tool_calls": [{}]}], CHAT, r"message 1 .*\(tool\) has null content"),
        (
            [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "\ud83d"}],
            CHAT,
            "message 2 .* surrogate",
        ),
    ],
)
def test_check_value_names_what_is_wrong(value: Any, field: Field, message: str) -> None:
    with pytest.raises(BadRecordError, match=message):
        check_value(value, field)


def test_check_value_passes_valid_values_through() -> None:
    assert check_value("plain", TEXT) == "plain"
    assert check_value("\U0001f600 and é", TEXT) == "\U0001f600 and é"  # what JSON's pair "\ud83d\ude00" decodes to
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "extra": 1}]
    assert check_value(chat, CHAT) is chat
    calls = [{"type": "function", "function": {"name": "f", "arguments": {}}}]
    tool_call = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": calls}]
    assert check_value(tool_call, CHAT) is tool_call  # OpenAI style: a call and no words


def test_values_of_a_json_record() -> None:
    assert values_of({"prompt": "p", "response": "r", "id": 3}, [Field("prompt"), Field("response")]) == ["p", "r"]
    with pytest.raises(BadRecordError, match="record is an array, not an object"):
        values_of([1], [TEXT])
    with pytest.raises(BadRecordError, match=r"record has no field 'body' \(use --prompt-field to pick another\)"):
        values_of({"text": "x"}, [Field("body", flag="--prompt-field")])


def test_columns_collect_checked_records_and_leave_a_bad_one_out() -> None:
    columns = Columns([Field("prompt"), Field("response")])
    columns.add(["p1", "r1"], 1)
    with pytest.raises(BadRecordError, match="field 'response' is null"):
        columns.add(["p2", None], 2)
    columns.add(["p3", "r3"], 3)
    assert len(columns) == 2
    batch = columns.take(position=42)
    assert batch.columns == [["p1", "p3"], ["r1", "r3"]] and batch.position == 42 and len(batch) == 2
    assert batch.records.tolist() == [1, 3]  # where each came from: the bad record's line is not among them
    assert len(columns) == 0 and columns.take(0).columns == [[], []]


def test_columns_convert_each_checked_record_into_one_column() -> None:
    seen: list[list[Any]] = []

    def convert(values: list[Any]) -> str:
        seen.append(values)
        if values[0] == "refuse":
            raise BadRecordError("the template refuses it")
        return "|".join(values)

    columns = Columns([Field("a"), Field("b")], convert)
    columns.add(["x", "y"], 1)
    with pytest.raises(BadRecordError, match="the template refuses it"):
        columns.add(["refuse", "y"], 2)
    with pytest.raises(BadRecordError, match="field 'b' is a number"):
        columns.add(["x", 5], 3)  # checked before conversion: convert never sees it
    assert columns.take(0).columns == [["x|y"]]
    assert seen == [["x", "y"], ["refuse", "y"]]
