"""The run identity: the output fingerprint and the tokenization-cache key follow the same resolved facts."""

from __future__ import annotations

import gzip
import json
import os
from importlib import resources
from pathlib import Path

import pytest
from typer.testing import CliRunner

import packcli.run.setup
from packcli.cli import app
from packcli.options import PackOptions
from packcli.run.setup import Setup, set_up
from tests.conftest import write_jsonl

runner = CliRunner()
TEMPLATE = (
    "{% for m in messages %}<|endoftext|>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|endoftext|>assistant: {% endif %}"
)


def make_tokenizer_dir(directory: Path, config: dict[str, object]) -> Path:
    """The bundled GPT-2 tokenizer as a directory with a tokenizer_config.json."""
    directory.mkdir(parents=True, exist_ok=True)
    packed = resources.files("packcli").joinpath("assets/gpt2/tokenizer.json.gz").read_bytes()
    (directory / "tokenizer.json").write_bytes(gzip.decompress(packed))
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    chats = [
        [{"role": "user", "content": f"question {k}"}, {"role": "assistant", "content": f"answer {k}"}]
        for k in range(20)
    ]
    return write_jsonl(tmp_path / "chats.jsonl", [{"messages": chat} for chat in chats])


def keys(setup: Setup) -> tuple[str, str]:
    return setup.fingerprint(), setup.cache_key()


def setup_for(corpus: Path, tokenizer: str, **options: object) -> Setup:
    return set_up([str(corpus)], PackOptions(tokenizer=tokenizer, messages_field="messages", **options))  # type: ignore[arg-type]


@pytest.mark.parametrize("scope", [0, 1], ids=["fingerprint", "cache_key"])
def test_identity_follows_resolved_facts_not_spellings(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch, scope: int
) -> None:
    tok = make_tokenizer_dir(tmp_path / "tok", {"eos_token": "<|endoftext|>", "chat_template": TEMPLATE})
    monkeypatch.chdir(tmp_path)
    base = keys(setup_for(corpus, "tok"))[scope]
    # How the path is spelled does not matter.
    for spelling in ("./tok/", str(tok.resolve()), "tok/tokenizer.json", str(tok / "tokenizer.json")):
        assert keys(setup_for(corpus, spelling))[scope] == base, spelling
    assert (
        keys(set_up([os.path.relpath(corpus)], PackOptions(tokenizer="tok", messages_field="messages")))[scope] == base
    )
    # The EOS in tokenizer_config.json changes the EOS id appended: another identity.
    make_tokenizer_dir(tok, {"eos_token": "!", "chat_template": TEMPLATE})
    assert keys(setup_for(corpus, "tok"))[scope] != base
    # So does the chat template.
    make_tokenizer_dir(tok, {"eos_token": "<|endoftext|>", "chat_template": TEMPLATE.replace(": ", ":: ")})
    changed_template = keys(setup_for(corpus, "tok"))[scope]
    assert changed_template != base
    make_tokenizer_dir(tok, {"eos_token": "<|endoftext|>", "chat_template": TEMPLATE})
    assert keys(setup_for(corpus, "tok"))[scope] == base
    # And packcli's version.
    monkeypatch.setattr(packcli.run.setup, "__version__", "999.0")
    assert keys(setup_for(corpus, "tok"))[scope] != base


def test_output_options_change_the_fingerprint_only(tmp_path: Path, corpus: Path) -> None:
    tok = str(make_tokenizer_dir(tmp_path / "tok", {"chat_template": TEMPLATE}))
    fingerprint, key = keys(setup_for(corpus, tok))
    other_fingerprint, other_key = keys(setup_for(corpus, tok, max_len=512))
    assert other_fingerprint != fingerprint and other_key == key
    _, no_eos_key = keys(setup_for(corpus, tok, eos=False))
    assert no_eos_key != key
    corpus.write_text(corpus.read_text() + corpus.read_text())
    assert keys(setup_for(corpus, tok)) != (fingerprint, key)


def test_an_edited_eos_makes_a_rerun_repack(tmp_path: Path) -> None:
    tok = make_tokenizer_dir(tmp_path / "tok", {"eos_token": "<|endoftext|>"})
    text = write_jsonl(tmp_path / "c.jsonl", [{"text": f"document number {k}"} for k in range(10)])
    args = ["pack", str(text), "--tokenizer", str(tok), "--out", str(tmp_path / "out"), "--max-len", "64", "--json"]
    first = json.loads(runner.invoke(app, args).stdout)
    assert json.loads(runner.invoke(app, args).stdout)["status"] == "up-to-date"
    make_tokenizer_dir(tok, {"eos_token": "!"})
    rerun = runner.invoke(app, [*args, "--overwrite"])
    assert rerun.exit_code == 0, rerun.output
    assert json.loads(rerun.stdout)["status"] == "packed"
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["fingerprint"] != first["fingerprint"]
    assert manifest["tokenizer"]["eos_id"] == 0  # "!" is GPT-2's id 0


def test_the_same_template_however_the_tokenizer_is_spelled(tmp_path: Path, corpus: Path) -> None:
    tok = make_tokenizer_dir(tmp_path / "tok", {"chat_template": TEMPLATE})
    outputs = []
    for name, spelling in (("dir", tok), ("file", tok / "tokenizer.json")):
        out = tmp_path / name
        result = runner.invoke(
            app, ["pack", str(corpus), "--messages-field", "messages", "--tokenizer", str(spelling), "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        outputs.append(out)
    shards = sorted(outputs[0].glob("*.arrow"))
    assert shards
    for first in shards:
        assert first.read_bytes() == (outputs[1] / first.name).read_bytes(), first.name
    manifests = [json.loads((out / "manifest.json").read_text()) for out in outputs]
    assert manifests[0]["fingerprint"] == manifests[1]["fingerprint"]  # the manifests differ only in the spelling
    assert manifests[0]["totals"] == manifests[1]["totals"]
    assert manifests[0]["totals"]["supervised_tokens"] > 0


def test_builtin_chatml_warns_without_its_special_tokens(tmp_path: Path, corpus: Path) -> None:
    result = runner.invoke(app, ["pack", str(corpus), "--messages-field", "messages", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "lacks <|im_start|> and <|im_end|> as special tokens" in result.stderr
