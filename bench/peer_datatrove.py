"""datatrove's tokenizer for the peer benchmark (run in datatrove's own environment, not packcli's): a
`JsonlReader` over the corpus's two halves and a `DocumentTokenizer` appending EOS, two tasks on two workers,
documents kept in order (`shuffle_documents=False`, the cheaper setting: `export --to nanotron` keeps the order
too). It writes one `.ds` with its `.ds.index` a task, what nanotron reads. Usage: peer_datatrove.py HALVES_DIR
TOKENIZER_JSON EOS_TEXT OUT."""

from __future__ import annotations

import sys

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer


def main() -> None:
    halves, tokenizer_json, eos, out = sys.argv[1:5]
    pipeline = [
        JsonlReader(halves),
        DocumentTokenizer(
            output_folder=f"{out}/tokens",
            tokenizer_name_or_path=tokenizer_json,
            eos_token=eos,
            shuffle_documents=False,
        ),
    ]
    LocalPipelineExecutor(pipeline=pipeline, tasks=2, workers=2, logging_dir=f"{out}/logs").run()


if __name__ == "__main__":
    main()
