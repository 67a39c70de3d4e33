"""Fine-tuning records: labels take loss on exactly the response (or the assistant turns), through packing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import read_jsonl, shared_path, write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from packcli.cli import app
from packcli.encode.tokenizer import load_tokenizer
from packcli.errors import BadRecordError, UsageError
from packcli.format.shards import read_shard
from packcli.options import PackOptions
from packcli.report.stats import packed_stats
from packcli.report.verify import verify_output
from packcli.run.driver import pack_corpus

EOS = 50256
runner = CliRunner()
TOKENIZER = load_tokenizer().tokenizer


def encode(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False).ids


def packed_documents(out: Path) -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) of every packed document."""
    documents = []
    for path in sorted(out.glob("shard-*.arrow")):
        table = read_shard(path)
        for ids, labels, cu in zip(*(table.column(c).to_pylist() for c in ("input_ids", "labels", "cu_seqlens"))):
            documents += [(ids[a:b], labels[a:b]) for a, b in zip(cu, cu[1:])]
    return documents


def check_prompt_response(records: list[dict], out: Path) -> None:  # type: ignore[type-arg]
    expected = {}
    for record in records:
        prompt, response = encode(record["prompt"]), [*encode(record["response"]), EOS]
        expected[tuple(prompt + response)] = (len(prompt), response)
    documents = packed_documents(out)
    assert len(documents) == len(expected)
    for ids, labels in documents:
        prompt_length, response = expected[tuple(ids)]
        assert labels[:prompt_length] == [-100] * prompt_length  # prompt: no loss
        assert labels[prompt_length:] == response  # response and EOS: loss on their own tokens


def test_bigbench_sft_supervises_exactly_the_responses(tmp_path: Path) -> None:
    corpus = shared_path("data/bigbench_sft.jsonl")
    options = PackOptions(max_len=2048, prompt_field="prompt", response_field="response")
    result = pack_corpus([str(corpus)], options, tmp_path / "out")
    records = read_jsonl(corpus)
    check_prompt_response(records, tmp_path / "out")
    totals = result.manifest["totals"]
    assert totals["documents"] == len(records) and totals["unsupervised_sequences"] == 0
    assert totals["supervised_tokens"] == sum(len(encode(r["response"])) + 1 for r in records)
    assert verify_output(tmp_path / "out").ok


def test_small_prompt_response_corpus(tmp_path: Path) -> None:
    records = [
        {"prompt": f"Question {i}: what is {i} + {i}? <|endoftext|>", "response": f" {2 * i}."} for i in range(40)
    ]
    path = write_jsonl(tmp_path / "sft.jsonl", records)
    pack_corpus([str(path)], PackOptions(max_len=64, prompt_field="prompt", response_field="response"), tmp_path / "o")
    check_prompt_response(records, tmp_path / "o")
    stats = packed_stats(tmp_path / "o")
    supervised = sum(len(encode(r["response"])) + 1 for r in records)
    assert stats["supervised_tokens"] == supervised
    assert stats["supervised_fraction"] == pytest.approx(supervised / stats["tokens"])


def test_a_record_whose_one_supervised_token_is_its_first_is_empty(tmp_path: Path) -> None:
    """Labels are -100 at every document's first token, so an empty prompt before a one-token response (with
    --no-eos) left a document with no supervised label: packed and counted as a document, against the docs' "every
    document has a supervised token". It is skipped and counted as empty, as a record with nothing to supervise."""
    records = [{"prompt": "", "response": "a"}, {"prompt": "q", "response": "hello there"}]
    path = write_jsonl(tmp_path / "sft.jsonl", records)
    options = PackOptions(max_len=8, prompt_field="prompt", response_field="response", eos=False)
    totals = pack_corpus([str(path)], options, tmp_path / "o").manifest["totals"]
    assert (totals["documents"], totals["empty_documents"], totals["unsupervised_sequences"]) == (1, 1, 0)
    assert packed_documents(tmp_path / "o") == [(encode("q") + encode("hello there"), [-100, *encode("hello there")])]


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 30)), min_size=1, max_size=25), st.integers(8, 48))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_packing_keeps_every_label_on_its_token(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[tuple[int, int]], max_len: int
) -> None:
    # " hello" and " world" are one token each: prompts are all " hello", responses all " world".
    hello, world = encode(" hello")[0], encode(" world")[0]
    records = [{"prompt": " hello" * p, "response": " world" * r} for p, r in sizes]
    tmp = tmp_path_factory.mktemp("labels")
    path = write_jsonl(tmp / "sft.jsonl", records)
    options = PackOptions(max_len=max_len, prompt_field="prompt", response_field="response", overflow="split")  # type: ignore[arg-type]
    pack_corpus([str(path)], options, tmp / "out")
    ids_total = 0
    for ids, labels in packed_documents(tmp / "out"):
        for k, (token, label) in enumerate(zip(ids, labels)):  # a piece's first token is a document start
            assert label == (token if k > 0 and token in (world, EOS) else -100)
            assert token in (hello, world, EOS)
        ids_total += len(ids)
    assert ids_total == sum(p + r + 1 for p, r in sizes)


CHATS = [
    {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Name a prime."},
            {"role": "assistant", "content": "Seven."},
            {"role": "user", "content": "Another, with <|im_end|> in it?"},
            {"role": "assistant", "content": "Eleven <|im_end|> too."},
        ]
    },
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]},
    {"messages": [{"role": "user", "content": "No answer here"}]},
]


def supervised_text(labels: list[int]) -> str:
    return TOKENIZER.decode([label for label in labels if label != -100], skip_special_tokens=False)


def test_chatml_supervises_assistant_turns(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "chat.jsonl", CHATS)
    result = pack_corpus([str(path)], PackOptions(max_len=256, messages_field="messages"), tmp_path / "o")
    assert result.manifest["totals"]["empty_documents"] == 1  # the chat without an assistant turn
    got = sorted(supervised_text(labels) for _, labels in packed_documents(tmp_path / "o"))
    assert got == sorted(
        [
            "Seven.<|im_end|>\nEleven <|im_end|> too.<|im_end|>\n<|endoftext|>",
            "Hello!<|im_end|>\n<|endoftext|>",
        ]
    )
    everything = pack_corpus(
        [str(path)], PackOptions(max_len=256, messages_field="messages", loss_on="all"), tmp_path / "all"
    )
    totals = everything.manifest["totals"]
    assert totals["supervised_tokens"] == totals["tokens"] - totals["documents"]  # all but each first token


JINJA = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_jinja_template_supervises_what_the_assistant_adds(tmp_path: Path) -> None:
    (tmp_path / "template.jinja").write_text(JINJA)
    path = write_jsonl(tmp_path / "chat.jsonl", CHATS[1:2])
    options = PackOptions(max_len=256, messages_field="messages", chat_template=str(tmp_path / "template.jinja"))
    pack_corpus([str(path)], options, tmp_path / "o")
    [(ids, labels)] = packed_documents(tmp_path / "o")
    assert TOKENIZER.decode(ids, skip_special_tokens=False) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|endoftext|>"
    )
    assert supervised_text(labels) == "Hello!<|im_end|>\n<|endoftext|>"


# Llama-2 and Mistral style: the template itself ends every assistant turn with the EOS token.
EOS_RENDERING = (
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }} [/INST]"
    "{% else %} {{ m.content }}{{ eos_token }}{% endif %}{% endfor %}"
)


def test_a_template_that_renders_eos_gets_no_second_one(tmp_path: Path) -> None:
    (tmp_path / "template.jinja").write_text(EOS_RENDERING)
    chats = [
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                      {"role": "user", "content": "More?"}, {"role": "assistant", "content": "Sure."}]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yes."},
                      {"role": "user", "content": "Bye"}]},
    ]  # fmt: skip
    path = write_jsonl(tmp_path / "chat.jsonl", chats)
    options = PackOptions(
        max_len=256, messages_field="messages", chat_template=str(tmp_path / "template.jinja"), shuffle=False
    )
    result = pack_corpus([str(path)], options, tmp_path / "o")
    ended, open_ended = packed_documents(tmp_path / "o")
    assert TOKENIZER.decode(ended[0], skip_special_tokens=False) == (
        "[INST] Hi [/INST] Hello!<|endoftext|>[INST] More? [/INST] Sure.<|endoftext|>"
    )
    assert ended[0][-2:] != [EOS, EOS] and ended[1][-1] == EOS  # the template's EOS, supervised, and only it
    assert supervised_text(ended[1]) == " Hello!<|endoftext|> Sure.<|endoftext|>"
    # A chat that ends with the user's turn gets EOS appended, not supervised (as with any template).
    assert TOKENIZER.decode(open_ended[0], skip_special_tokens=False).endswith("[INST] Bye [/INST]<|endoftext|>")
    assert open_ended[1][-1] == -100 and supervised_text(open_ended[1]) == " Yes.<|endoftext|>"
    assert result.manifest["totals"]["tokens"] == len(ended[0]) + len(open_ended[0])
    assert verify_output(tmp_path / "o").ok


def test_a_template_that_renders_bos_and_eos_with_a_mistral_tokenizer_gets_one_of_each(tmp_path: Path) -> None:
    tekken = shared_path("tokenizers/tekken")
    (tmp_path / "template.jinja").write_text(EOS_RENDERING)
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": chat}])
    template = str(tmp_path / "template.jinja")
    options = PackOptions(
        max_len=256, messages_field="messages", chat_template=template, tokenizer=str(tekken), bos=True
    )
    pack_corpus([str(path)], options, tmp_path / "o")
    [(ids, labels)] = packed_documents(tmp_path / "o")
    assert ids.count(1) == 1 and ids[0] == 1 and labels[0] == -100  # <s>: the template's, once, though --bos
    assert ids.count(2) == 1 and ids[-1] == 2 and labels[-1] == 2  # </s>: the template's, once, supervised
    assert verify_output(tmp_path / "o").ok


def test_sft_default_overflow_drops_and_counts(tmp_path: Path) -> None:
    records = [{"prompt": "long " * 100, "response": "x"}, {"prompt": "short", "response": "y"}]
    path = write_jsonl(tmp_path / "sft.jsonl", records)
    result = pack_corpus(
        [str(path)], PackOptions(max_len=32, prompt_field="prompt", response_field="response"), tmp_path / "o"
    )
    assert result.manifest["options"]["overflow"] == "drop"
    assert result.manifest["totals"]["dropped_documents"] == 1 and result.manifest["totals"]["documents"] == 1


BAD_RECORDS = [
    (
        {"prompt": "p"},
        ["--prompt-field", "prompt", "--response-field", "response"],
        "record has no field 'response'",
    ),
    (
        {"messages": [{"content": "x"}]},
        ["--messages-field", "messages"],
        "message 1 of 'messages' has no role",
    ),
    (
        {"messages": [{"role": "robot", "content": "x"}]},
        ["--messages-field", "messages"],
        "message 1 has unknown role 'robot'",
    ),
    (
        {"messages": [{"role": "user"}]},
        ["--messages-field", "messages"],
        "message 1 of 'messages' has no string content",
    ),
    (
        {"messages": [{"role": "user", "content": None}]},
        ["--messages-field", "messages"],
        "message 1 of 'messages' (user) has null content, which only an assistant message carrying tool_calls",
    ),
]


@pytest.mark.parametrize("record,flags,message", BAD_RECORDS)
def test_bad_sft_records_name_file_and_line(tmp_path: Path, record: dict, flags: list[str], message: str) -> None:  # type: ignore[type-arg]
    good = {
        "prompt": "p",
        "response": "r",
        "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
    }
    path = write_jsonl(tmp_path / "bad.jsonl", [good, record])
    result = runner.invoke(app, ["pack", str(path), *flags, "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and f"bad.jsonl:2: {message}" in result.stderr, result.stderr
    skipped = runner.invoke(
        app, ["pack", str(path), *flags, "--out", str(tmp_path / "o"), "--skip-bad-records", "--json"]
    )
    assert skipped.exit_code == 0 and json.loads(skipped.stdout)["bad_records"] == 1


def test_failing_template_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "t.jinja").write_text(
        "{% if messages|length > 2 %}{{ raise_exception('too long') }}{% endif %}{{ messages[0].content }}"
    )
    chat = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    long_chat = {"messages": chat["messages"] * 2}
    path = write_jsonl(tmp_path / "c.jsonl", [chat, long_chat])
    args = [
        "pack",
        str(path),
        "--messages-field",
        "messages",
        "--chat-template",
        str(tmp_path / "t.jinja"),
        "--out",
        str(tmp_path / "o"),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and "c.jsonl:2: chat template raised: too long" in result.stderr


def test_option_combinations_are_checked() -> None:
    with pytest.raises(UsageError, match="go together"):
        PackOptions(prompt_field="p")
    with pytest.raises(UsageError, match="not both"):
        PackOptions(prompt_field="p", response_field="r", messages_field="m")
    with pytest.raises(UsageError, match="needs --messages-field"):
        PackOptions(chat_template="t.jinja")


def test_loader_uses_the_labels_column(tmp_path: Path) -> None:
    torch_module = pytest.importorskip("torch")
    from packcli.torch import PackedDataset, collate_varlen

    records = [{"prompt": f"Q{i}?", "response": f" A{i}."} for i in range(10)]
    path = write_jsonl(tmp_path / "sft.jsonl", records)
    pack_corpus([str(path)], PackOptions(max_len=64, prompt_field="prompt", response_field="response"), tmp_path / "o")
    row = PackedDataset(tmp_path / "o", shuffle=False).row(0)
    batch = collate_varlen([row])
    expected = np.array(row["labels"], dtype=np.int64)
    expected[row["cu_seqlens"][:-1]] = -100
    assert torch_module.equal(batch["labels"][0], torch_module.from_numpy(expected))
    assert (batch["labels"] != -100).sum() > 0


def test_verify_catches_a_moved_label(tmp_path: Path) -> None:
    import hashlib

    import pyarrow as pa

    records = [{"prompt": f"Q{i}?", "response": f" A{i}."} for i in range(10)]
    path = write_jsonl(tmp_path / "sft.jsonl", records)
    out = tmp_path / "o"
    pack_corpus([str(path)], PackOptions(max_len=64, prompt_field="prompt", response_field="response"), out)
    shard = out / "shard-00000.arrow"
    table = read_shard(shard)
    rows = table.to_pylist()
    supervised_at = next(i for i, label in enumerate(rows[0]["labels"]) if label != -100)
    rows[0]["labels"][supervised_at] += 1
    with pa.ipc.new_stream(str(shard), table.schema) as writer:
        writer.write_table(pa.Table.from_pylist(rows, schema=table.schema))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["shards"][0].update(bytes=shard.stat().st_size, sha256=hashlib.sha256(shard.read_bytes()).hexdigest())
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert "label neither -100 nor the input id" in " ".join(verify_output(out).problems)


def test_template_failure_is_a_bad_record_error() -> None:
    from packcli.encode.chat import JinjaTemplate

    with pytest.raises(BadRecordError, match="failed to render"):
        JinjaTemplate("{{ messages[5].content }}", "t").render([{"role": "user", "content": "x"}], False)


# Qwen2.5-Instruct's chat template without its tools branch, and its tokenizer_config.json's EOS: `<|im_end|>`.
QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
IM_END = 151645


def qwen25_instruct(directory: Path) -> Path:
    """A Qwen2.5-Instruct style tokenizer directory: the shared Qwen tokenizer.json (whose own EOS is
    `<|endoftext|>`) with a tokenizer_config.json naming `<|im_end|>` as EOS and carrying the chat template."""
    directory.mkdir()
    (directory / "tokenizer.json").write_bytes(shared_path("tokenizers/qwen/tokenizer.json").read_bytes())
    config = {"eos_token": "<|im_end|>", "chat_template": QWEN25_TEMPLATE}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def qwen_documents(tmp_path: Path, chats: list[dict], *flags: str) -> tuple[Any, list[tuple[list[int], list[int]]]]:  # type: ignore[type-arg]
    model = qwen25_instruct(tmp_path / "qwen2.5-instruct")
    path = write_jsonl(tmp_path / "chats.jsonl", chats)
    out = tmp_path / "o"
    args = ["pack", str(path), "--messages-field", "messages", "--tokenizer", str(model), "--out", str(out)]
    result = runner.invoke(app, [*args, "--no-shuffle", "--max-len", "512", *flags])
    assert result.exit_code == 0, result.output
    return result, packed_documents(out)


def test_a_chatml_template_whose_eos_is_im_end_ends_each_chat_at_its_own_im_end(tmp_path: Path) -> None:
    """Qwen2.5-Instruct renders `<|im_end|>\\n` after every turn and names `<|im_end|>` EOS: the document ends at
    the last turn's `<|im_end|>` (supervised when the assistant spoke last), the `\\n` after it dropped, and no
    second `<|im_end|>` appended; said once at pack time."""
    qwen = load_tokenizer(str(shared_path("tokenizers/qwen"))).tokenizer
    chats = [
        {"messages": [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "Seven."}]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yes."},
                      {"role": "user", "content": "Bye"}]},
    ]  # fmt: skip
    result, documents = qwen_documents(tmp_path, chats)
    answered, open_ended = sorted(documents, key=lambda document: len(document[0]))
    system = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    assert qwen.decode(answered[0], skip_special_tokens=False) == (
        f"{system}<|im_start|>user\nName a prime.<|im_end|>\n<|im_start|>assistant\nSeven.<|im_end|>"
    )
    assert answered[0].count(IM_END) == 3 and answered[0][-1] == IM_END and answered[1][-1] == IM_END
    assert qwen.decode([id for id in answered[1] if id != -100], skip_special_tokens=False) == "Seven.<|im_end|>"
    assert open_ended[0][-1] == IM_END and open_ended[0].count(IM_END) == 4 and open_ended[1][-1] == -100
    notices = [line for line in result.stderr.splitlines() if "after its EOS" in line]
    assert len(notices) == 1 and notices[0].startswith("warning: the chat template renders '\\n' after its EOS")
    assert verify_output(tmp_path / "o").ok


def test_messages_whose_text_the_template_turns_into_special_tokens_are_counted(tmp_path: Path) -> None:
    """A user who types `<|im_end|>` under a Jinja template (rendered and tokenized as apply_chat_template does)
    makes a special token of it: counted per message, in one warning line and the manifest's
    `special_text_messages`."""
    chats = [
        {"messages": [{"role": "user", "content": "Is <|im_end|> a token?"},
                      {"role": "assistant", "content": "Yes: <|im_end|> ends a turn."}]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]},
    ]  # fmt: skip
    result, documents = qwen_documents(tmp_path, chats)
    plain, quoted = sorted(documents, key=lambda document: len(document[0]))
    assert quoted[0].count(IM_END) == 3 + 2 and plain[0].count(IM_END) == 3
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["totals"]["special_text_messages"] == 2
    warned = [line for line in result.stderr.splitlines() if "special_text_messages" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: 2 messages hold special-token text"), result.stderr
    assert verify_output(tmp_path / "o").ok
