"""TRL's pipeline, as its docs show it, for the peer benchmark (run in TRL's own environment, not packcli's):
`datasets.load_dataset("json")`, tokenization by `Dataset.map` on both cores (each text's ids and EOS, as the
tokenizer's own batch call gives them), `trl.pack_dataset(..., strategy="bfd_split")` (best-fit decreasing that
splits long documents into pieces of the sequence length, as `pack --overflow split` does), `save_to_disk`.
Usage: peer_trl.py CORPUS TOKENIZER_JSON MAX_LEN EOS_ID OUT. The datasets cache lives in OUT, removed between
runs, so no run reuses another's."""

from __future__ import annotations

import sys
from pathlib import Path

from datasets import load_dataset
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast
from trl import pack_dataset


def main() -> None:
    corpus, tokenizer_json, max_len, eos, out = (
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        int(sys.argv[4]),
        Path(sys.argv[5]),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(tokenizer_json))
    dataset = load_dataset("json", data_files=corpus, split="train", cache_dir=str(out / "cache"))

    def tokenize(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        ids = tokenizer(batch["text"], add_special_tokens=False)["input_ids"]
        return {"input_ids": [[*document, eos] for document in ids]}

    tokenized = dataset.map(tokenize, batched=True, num_proc=2, remove_columns=dataset.column_names)
    packed = pack_dataset(tokenized, max_len, strategy="bfd_split")
    packed.save_to_disk(str(out / "packed"))


if __name__ == "__main__":
    main()
