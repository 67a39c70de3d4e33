"""The peers `bench_peers.py` runs: what each is, the environment it runs in, its command, where its output lands,
how that output is read back, and the packcli export it is compared with (none: `pack`'s own shards)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Setup:
    """What every peer's command needs: the corpus (one file, and its two halves), the tokenizer, its EOS, the
    Megatron-LM checkout (or None), and the token type the vocabulary needs."""

    corpus: Path
    halves: Path
    tokenizer: Path  # the tokenizer.json
    eos_id: int
    eos_text: str
    max_len: int
    dtype: str
    megatron: Path | None
    scratch: Path

    def hf_dir(self) -> Path:
        """A directory transformers' AutoTokenizer loads: the tokenizer.json and a config naming its class and EOS."""
        folder = self.scratch / f"hf-tokenizer-{self.tokenizer.parent.name}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tokenizer.json").write_bytes(self.tokenizer.read_bytes())
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": self.eos_text, "model_max_length": 1 << 30}
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        return folder

    def legacy_tokenizer(self) -> Path:
        """The tokenizer.json with its BPE merges as "a b" strings, the form tokenizers 0.19 (dolma's pin) reads:
        it refuses the newer pairs. Lossless for byte-level BPE, whose tokens hold no space."""
        data = json.loads(self.tokenizer.read_text())
        data["model"]["merges"] = [" ".join(pair) for pair in data["model"]["merges"]]
        path = self.scratch / f"legacy-tokenizer-{self.tokenizer.parent.name}.json"
        path.write_text(json.dumps(data, ensure_ascii=False))
        return path


@dataclass(frozen=True)
class Peer:
    key: str
    title: str
    env: str  # its environment in peer_envs.STEPS
    export: str | None  # the packcli export format it is compared with; None: pack's shards
    reader: str  # how peer_tokens reads its output
    command: Callable[[Setup, Path], list[str]]  # the command, given the setup and its output folder
    outputs: Callable[[Path], list[Path]]  # the files to read back, given its output folder
    needs_megatron: bool = False


def _megatron(key: str, title: str, script: str, *extra: str) -> Peer:
    """One of Megatron-LM's scripts, run from the checkout with a transformers tokenizer directory, EOD appended."""

    def command(setup: Setup, out: Path) -> list[str]:
        assert setup.megatron is not None
        return [
            "python", str(setup.megatron / "tools" / script), "--input", str(setup.corpus),
            "--output-prefix", str(out / "megatron"), "--tokenizer-type", "HuggingFaceTokenizer",
            "--tokenizer-model", str(setup.hf_dir()), "--append-eod", *extra,
        ]  # fmt: skip

    return Peer(key, title, "megatron", "megatron", "megatron", command, lambda out: list(out.glob("*.idx")), True)


def _dolma(setup: Setup, out: Path) -> list[str]:
    return [
        "dolma", "tokens", "--documents", str(setup.halves / "*.jsonl"), "--destination", str(out / "tokens"),
        "--tokenizer.name_or_path", str(setup.legacy_tokenizer()), "--tokenizer.eos_token_id", str(setup.eos_id),
        "--tokenizer.encode_special_tokens", "--processes", "2", "--dtype", setup.dtype,
    ]  # fmt: skip


def _datatrove(setup: Setup, out: Path) -> list[str]:
    return [
        "python",
        str(HERE / "peer_datatrove.py"),
        str(setup.halves),
        str(setup.tokenizer),
        setup.eos_text,
        str(out),
    ]


def _trl(setup: Setup, out: Path) -> list[str]:
    script = str(HERE / "peer_trl.py")
    return ["python", script, str(setup.corpus), str(setup.tokenizer), str(setup.max_len), str(setup.eos_id), str(out)]


PEERS = [
    _megatron("megatron", "Megatron-LM tools/preprocess_data.py --workers 2", "preprocess_data.py", "--workers", "2"),
    _megatron(
        "megatron-fast",
        "Megatron-LM tools/preprocess_data_fast.py (gigatoken)",
        "preprocess_data_fast.py",
        "--use-gigatoken",
    ),
    Peer(
        "dolma",
        "dolma 1.2.1 `dolma tokens`, 2 processes",
        "dolma",
        "olmo-core",
        "eos",
        _dolma,
        lambda out: list((out / "tokens").rglob("*.npy")),
    ),
    Peer(
        "datatrove",
        "datatrove 0.10.1 DocumentTokenizer, 2 tasks",
        "datatrove",
        "nanotron",
        "ds",
        _datatrove,
        lambda out: list((out / "tokens").rglob("*.ds")),
    ),
    Peer(
        "trl",
        "TRL 1.16 datasets.map (2 procs) + pack_dataset bfd_split",
        "trl",
        None,
        "arrow",
        _trl,
        lambda out: list((out / "packed").glob("*.arrow")),
    ),
]
