"""The loader's batches in a model nobody here wrote: transformers' LlamaForCausalLM (random weights from a config,
no download) takes each layout whole and gives every document the logits and losses it gets alone."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the loader needs the torch extra")
transformers = pytest.importorskip("transformers", reason="these tests need transformers (the dev extra)")
import torch.nn.functional as F  # noqa: E402
from conftest import ROWS_MAX_LEN, SAMPLE, read_jsonl, write_jsonl  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from packcli.options import PackOptions  # noqa: E402
from packcli.run.driver import pack_corpus  # noqa: E402
from packcli.torch import (  # noqa: E402
    PackedDataset,
    RowCost,
    block_causal_mask,
    collate_padded,
    collate_varlen,
    flash_attention_kwargs,
    flex_block_mask,
    loader,
)

MAX_LEN = ROWS_MAX_LEN  # the max_len of the packed_rows output
# Padded width of these tests: torch 2.13's CPU inductor fails to build flex_attention for some shapes (a C++
# codegen error at 128 padded tokens here, and for shapes recompiled as dynamic) and builds it at 256, 384, 512.
WIDTH = 384
TOLERANCE = 1e-4
COMPILED_SHAPE: list[tuple[int, ...]] = []  # the input shape flex_attention was compiled for last in this process
FLEX_GROUP = pytest.mark.xdist_group("flex_attention")  # under make test, the flex cases share one worker's compiles
FLEX = pytest.param("flex_attention", marks=FLEX_GROUP)
CONFIG: dict[str, Any] = {
    "vocab_size": 50257,  # the bundled GPT-2 tokenizer's ids
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
# The Trainer tests' model: what they check is which rows each step trains on and what it counts, not the logits,
# so one layer of half the width (a step costs the vocabulary's logits and their gradient, whatever the layers).
TRAIN_CONFIG: dict[str, Any] = {
    **CONFIG,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


@pytest.fixture(scope="module")
def packed(packed_rows: Path) -> Path:
    """The session's output packed at max_len 96 (read-only)."""
    return packed_rows


@pytest.fixture(scope="module")
def model() -> Any:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(use_cache=False, **CONFIG)).eval()


@pytest.fixture(scope="module")
def rows(packed: Path) -> list[dict[str, Any]]:
    dataset = PackedDataset(packed, shuffle=False)
    every = sorted((dataset.row(i) for i in range(dataset.num_rows)), key=lambda row: -len(row["cu_seqlens"]))
    chosen = every[:4]
    assert sum(len(row["cu_seqlens"]) - 1 for row in chosen) > 8  # the rows really hold several documents
    return chosen


def documents(rows: list[dict[str, Any]]) -> list[np.ndarray]:
    return [row["input_ids"][a:b] for row in rows for a, b in zip(row["cu_seqlens"][:-1], row["cu_seqlens"][1:])]


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token loss with the HF shift, over the tokens whose label is not -100."""
    shifted = labels[:, 1:].reshape(-1)
    losses = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), shifted, ignore_index=-100, reduction="none")
    return losses[shifted != -100]


def run(model: Any, implementation: str, **inputs: Any) -> Any:
    """The model's output with ``implementation``; skips (saying why) where flex_attention cannot compile."""
    model.set_attn_implementation(implementation)
    # Inductor compiles flex_attention in this process: a pool of compile processes, each starting torch, cost more
    # than it saved here (the flex cases' wall time halved on a loaded 2-core machine, their CPU time no higher).
    compiling = torch._inductor.config.patch(compile_threads=1)
    try:
        with torch.no_grad(), warnings.catch_warnings(), compiling:
            if implementation == "flex_attention":
                # A second shape would make torch.compile recompile with dynamic shapes, whose CPU kernel torch 2.13
                # fails to build: a new shape starts from a reset and compiles static. A batch of the shape compiled
                # last keeps that work (most of a compile): the flex cases run in turn on one worker (FLEX_GROUP).
                shape = tuple(inputs["input_ids"].shape)
                if [shape] != COMPILED_SHAPE:
                    torch._dynamo.reset()
                    COMPILED_SHAPE[:] = [shape]
                warnings.simplefilter("ignore", DeprecationWarning)  # torch.compile and transformers' flex path
            return model(**inputs)
    except Exception as error:
        if implementation == "flex_attention" and type(error).__name__ in ("InductorError", "BackendCompilerFailed"):
            pytest.skip(f"flex_attention does not compile here: {str(error).splitlines()[0][:200]}")
        raise


@pytest.fixture(scope="module")
def alone(model: Any, rows: list[dict[str, Any]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each document run on its own (eager attention, a plain causal mask): its logits and per-token losses."""
    out = []
    for document in documents(rows):
        ids = torch.from_numpy(document.astype(np.int64))[None]
        logits = run(model, "eager", input_ids=ids).logits
        labels = ids.clone()
        labels[0, 0] = -100
        out.append((logits[0], token_losses(logits, labels)))
    return out


def assert_documents_alone(
    logits: torch.Tensor, labels: torch.Tensor, rows: list[dict[str, Any]], expected: list[Any], layout: str
) -> None:
    if layout == "varlen":
        offsets = np.concatenate(([0], np.cumsum([len(row["input_ids"]) for row in rows])))
        got = [
            logits[0, o + a : o + b]
            for o, row in zip(offsets, rows)
            for a, b in zip(row["cu_seqlens"][:-1], row["cu_seqlens"][1:])
        ]
    else:
        got = [
            logits[k, a:b] for k, row in enumerate(rows) for a, b in zip(row["cu_seqlens"][:-1], row["cu_seqlens"][1:])
        ]
    assert len(got) == len(expected)
    for have, (want, _) in zip(got, expected):
        torch.testing.assert_close(have, want, atol=TOLERANCE, rtol=0)
    want_losses = torch.cat([losses for _, losses in expected])
    torch.testing.assert_close(token_losses(logits, labels), want_losses, atol=TOLERANCE, rtol=0)


def collate(layout: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return collate_varlen(rows) if layout == "varlen" else collate_padded(rows, max_len=WIDTH)


@pytest.mark.parametrize("layout", ["varlen", "padded"])
@pytest.mark.parametrize("implementation", ["sdpa", "eager", FLEX])
def test_model_takes_a_batch_whole(model: Any, rows: Any, alone: Any, implementation: str, layout: str) -> None:
    batch = collate(layout, rows)
    output = run(model, implementation, **batch, use_cache=False)
    assert not torch.isnan(output.logits).any()
    assert_documents_alone(output.logits, batch["labels"], rows, alone, layout)
    # The model's own loss is the mean of those per-token losses.
    want = torch.cat([losses for _, losses in alone]).mean()
    torch.testing.assert_close(output.loss, want, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("layout", ["varlen", "padded"])
def test_num_items_in_batch_makes_the_losses_of_a_global_batch_its_token_mean(
    model: Any, packed: Path, layout: str
) -> None:
    """Two simulated ranks, two micro-steps, balanced: the model's losses with the batches' ``num_items_in_batch``
    (each a sum over its tokens divided by the global batch's count) add up to the mean over every token of the
    global batch, as one big batch would give, though the micro-batches hold different numbers of tokens."""
    options = {"batch_size": 2, "grad_accum": 2, "world_size": 2, "layout": layout, "seed": 4}
    cost = RowCost.from_config(CONFIG)
    ranks = [list(loader(packed, rank=rank, balance=cost, **options)) for rank in (0, 1)]
    steps = ([batch for rank in ranks for batch in rank[k : k + 2]] for k in range(0, len(ranks[0]) - 1, 2))
    # the first global batch whose micro-batches hold different numbers of supervised tokens
    batches = next(step for step in steps if len({int((batch["labels"] != -100).sum()) for batch in step}) > 1)
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        outputs = [model(**batch, use_cache=False) for batch in batches]
    every_token = torch.cat([token_losses(out.logits, batch["labels"]) for out, batch in zip(outputs, batches)])
    assert len({int(batch["num_items_in_batch"]) for batch in batches}) == 1
    assert int(batches[0]["num_items_in_batch"]) == len(every_token)
    torch.testing.assert_close(sum(out.loss for out in outputs), every_token.mean(), atol=TOLERANCE, rtol=0)


MASKS: dict[str, Callable[[torch.Tensor], Any]] = {
    "sdpa": block_causal_mask,
    "eager": partial(block_causal_mask, dtype=torch.float32),
    "flex_attention": flex_block_mask,
}


@pytest.mark.parametrize("implementation", [FLEX if name == "flex_attention" else name for name in MASKS])
def test_explicit_masks_in_each_form(model: Any, rows: Any, alone: Any, implementation: str) -> None:
    batch = collate_padded(rows, max_len=WIDTH)
    mask = MASKS[implementation](batch["document_ids"])
    output = run(
        model, implementation, input_ids=batch["input_ids"], position_ids=batch["position_ids"], attention_mask=mask
    )
    assert_documents_alone(output.logits, batch["labels"], rows, alone, "padded")


@pytest.mark.parametrize("pitfall", ["2d attention_mask", "use_cache"])
def test_the_pitfalls_really_mix_documents(model: Any, rows: Any, alone: Any, pitfall: str) -> None:
    """What docs/loader.md warns about: a 2D mask, or a cache, turns off transformers' packed-document detection."""
    batch = collate_padded(rows, max_len=WIDTH)
    if pitfall == "use_cache":
        output = run(model, "sdpa", **batch, use_cache=True)
    else:
        output = run(model, "sdpa", **batch, attention_mask=(batch["document_ids"] >= 0).long(), use_cache=False)
    with pytest.raises(AssertionError):
        assert_documents_alone(output.logits, batch["labels"], rows, alone, "padded")


def test_varlen_equals_transformers_flattening_collator(rows: Any) -> None:
    from transformers import DataCollatorWithFlattening

    theirs = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_tensors="pt")(
        [{"input_ids": document.tolist()} for document in documents(rows)]
    )
    ours = collate_varlen(rows)
    for key in ("input_ids", "labels", "position_ids"):
        assert ours[key].tolist() == theirs[key].tolist(), key
    kwargs = flash_attention_kwargs(ours)
    assert kwargs["cu_seq_lens_q"].tolist() == theirs["cu_seq_lens_q"].tolist() == kwargs["cu_seq_lens_k"].tolist()
    assert kwargs["max_length_q"] == theirs["max_length_q"] == kwargs["max_length_k"]


def test_trainer_runs_on_packed_shards(packed: Path, tmp_path: Path) -> None:
    """The recipe of docs/loader.md: a Trainer over a PackedDataset and a collator, a few steps, on the CPU."""
    from transformers import Trainer, TrainingArguments

    dataset = PackedDataset(packed, seed=0, batch_size=4)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(use_cache=False, **TRAIN_CONFIG))
    before = model.model.embed_tokens.weight.detach().clone()
    arguments = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        max_steps=3,
        learning_rate=1e-3,
        remove_unused_columns=False,  # else the Trainer drops the rows' cu_seqlens before collating
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        dataloader_num_workers=0,
    )
    collator = partial(collate_padded, max_len=dataset.max_len, pad_id=dataset.pad_id)
    trainer = Trainer(model=model, args=arguments, train_dataset=dataset, data_collator=collator)
    result = trainer.train()
    assert trainer.state.global_step == 3
    assert np.isfinite(result.training_loss) and result.training_loss > 0
    assert not torch.equal(before, model.model.embed_tokens.weight.detach())
    # Rows counted by the dataset: the 12 trained on, and up to one batch that accelerate's loader reads ahead.
    assert 3 * 4 <= dataset.consumed <= 4 * 4


def test_a_trainer_with_gradient_accumulation_on_a_balanced_dataset(packed: Path, tmp_path: Path) -> None:
    """The balanced-steps recipe of docs/loader.md: the dataset's batch_size and grad_accum those of the Trainer,
    balance_ranks its processes; the batches' num_items_in_batch is the one the Trainer counts itself."""
    from transformers import Trainer, TrainingArguments

    counted = []

    class Recording(Trainer):  # type: ignore[misc]
        def compute_loss(self, model: Any, inputs: Any, num_items_in_batch: Any = None, **kwargs: Any) -> Any:
            counted.append((int(inputs["num_items_in_batch"]), int(num_items_in_batch)))
            return super().compute_loss(model, inputs, num_items_in_batch=num_items_in_batch, **kwargs)

    cost = RowCost.from_config(TRAIN_CONFIG)
    dataset = PackedDataset(packed, seed=0, batch_size=2, grad_accum=3, balance=cost, rank=0, world_size=1,
                            balance_ranks=1)  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(use_cache=False, **TRAIN_CONFIG))
    arguments = TrainingArguments(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=2, gradient_accumulation_steps=3, max_steps=2,
        learning_rate=1e-3, remove_unused_columns=False, use_cpu=True, report_to="none", save_strategy="no",
    )  # fmt: skip
    collator = partial(collate_varlen, pad_id=dataset.pad_id)
    result = Recording(model=model, args=arguments, train_dataset=dataset, data_collator=collator).train()
    assert np.isfinite(result.training_loss) and len(counted) == 6
    assert all(ours == theirs for ours, theirs in counted)


@pytest.mark.parametrize("collator", [collate_padded, collate_varlen])
def test_a_trainer_that_drops_cu_seqlens_gets_one_line_naming_remove_unused_columns(
    collator: Callable[..., Any], packed: Path, model: Any, tmp_path: Path
) -> None:
    """With the Trainer's default ``remove_unused_columns=True`` the rows reach the collator without
    ``cu_seqlens`` (the model's forward takes no such argument): a ``ValueError`` that names the fix, not a
    ``KeyError: 'cu_seqlens'`` from inside the collator."""
    from transformers import Trainer, TrainingArguments

    arguments = TrainingArguments(output_dir=str(tmp_path / "run"), use_cpu=True, report_to="none", max_steps=1)
    dataset = PackedDataset(packed, seed=0, batch_size=2)
    trainer = Trainer(model=model, args=arguments, train_dataset=dataset, data_collator=partial(collator, pad_id=0))
    with pytest.raises(ValueError, match=r"^rows without cu_seqlens .*remove_unused_columns=False") as refused:
        next(iter(trainer.get_train_dataloader()))
    assert "\n" not in str(refused.value)


def test_trainer_with_dataloader_workers_sees_each_row_once_per_epoch(tmp_path: Path) -> None:
    """``dataloader_num_workers=2``: the Trainer builds a plain DataLoader with workers and calls ``set_epoch``
    each epoch; every row is trained on once per epoch, each epoch in its own order (the dataset's)."""
    from transformers import Trainer, TrainingArguments

    corpus = write_jsonl(tmp_path / "corpus.jsonl", read_jsonl(SAMPLE)[:4])
    pack_corpus([str(corpus)], PackOptions(max_len=MAX_LEN), tmp_path / "packed")
    dataset = PackedDataset(tmp_path / "packed", seed=0, batch_size=4)
    steps_per_epoch = -(-dataset.num_rows // 4)
    assert 3 <= steps_per_epoch <= 40  # a few steps: the test stays fast
    seen: list[list[int]] = []

    class RecordingTrainer(Trainer):  # type: ignore[misc]
        def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            seen.append(inputs["row_index"].tolist())
            return super().compute_loss(model, inputs, *args, **kwargs)

    torch.manual_seed(0)
    arguments = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        max_steps=2 * steps_per_epoch,
        remove_unused_columns=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        dataloader_num_workers=2,
    )
    collator = partial(collate_padded, max_len=dataset.max_len, pad_id=dataset.pad_id)
    model = LlamaForCausalLM(LlamaConfig(use_cache=False, **TRAIN_CONFIG))
    RecordingTrainer(model=model, args=arguments, train_dataset=dataset, data_collator=collator).train()
    epochs = [[row for batch in seen[e * steps_per_epoch : (e + 1) * steps_per_epoch] for row in batch] for e in (0, 1)]
    expected = []
    for epoch in (0, 1):
        dataset.set_epoch(epoch)
        expected.append(dataset.rank_rows().tolist())
    assert epochs == expected and epochs[0] != epochs[1]


@pytest.mark.gpu
def test_flash_attention_varlen_on_a_gpu(rows: Any) -> None:
    """bf16 flash_attention_2 on a packed batch against each document alone (GPU only; figures in docs)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the flash-attn varlen check needs a GPU")
    pytest.importorskip("flash_attn", reason="flash_attention_2 needs the flash-attn package")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(use_cache=False, **CONFIG)).to("cuda", torch.bfloat16).eval()
    model.set_attn_implementation("flash_attention_2")
    batch = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in collate_varlen(rows).items()}
    with torch.no_grad():
        packed_logits = model(**batch, **flash_attention_kwargs(batch)).logits[0].float()
        cu = batch["cu_seqlens"].tolist()
        worst = 0.0
        for document, a, b in zip(documents(rows), cu[:-1], cu[1:]):
            ids = torch.from_numpy(document.astype(np.int64))[None].cuda()
            single = model(input_ids=ids).logits[0].float()
            worst = max(worst, (packed_logits[a:b] - single).abs().max().item())
    assert worst < 5e-2  # bf16: both runs round the same kernels' inputs, not the same sums


TRAINER_SCRIPT = """
import json, sys
from functools import partial
from pathlib import Path
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
from packcli.torch import PackedDataset, RowCost, collate_padded

packed, out, steps, config = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])

def train(recipe):
    # "balanced": the balanced recipe of docs/loader.md (balance_ranks=2, dispatch_batches=False); "accelerate": the
    # plain recipe (accelerate splits the rows); "dataset": each rank its own rows (refused: the process fails)
    balanced = recipe == "balanced"
    options = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2,
               "accelerator_config": {"dispatch_batches": False}} if balanced else {"per_device_train_batch_size": 4}
    arguments = TrainingArguments(output_dir=str(out / recipe), max_steps=steps[recipe], remove_unused_columns=False,
        use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True, **options)
    assert arguments.world_size == 2 and torch.distributed.is_initialized()
    if balanced:
        dataset = PackedDataset(packed, seed=0, rank=0, world_size=1, batch_size=2, grad_accum=2,
            balance=RowCost(per_token=1.0, per_square=1.0), balance_ranks=arguments.world_size)
    else:
        dataset = PackedDataset(packed, seed=0, batch_size=4, **({"rank": 0, "world_size": 1} if recipe == "accelerate" else {}))
    seen = []

    class Recording(Trainer):
        def compute_loss(self, model, inputs, num_items_in_batch=None, **kwargs):
            rows = inputs["row_index"].tolist()
            seen.append([rows, inputs["num_items_in_batch"], int(num_items_in_batch)] if balanced else rows)
            return super().compute_loss(model, inputs, num_items_in_batch=num_items_in_batch, **kwargs)

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(use_cache=False, **config))
    collator = partial(collate_padded, max_len=dataset.max_len, pad_id=dataset.pad_id)
    Recording(model=model, args=arguments, train_dataset=dataset, data_collator=collator).train()
    (out / f"seen-{recipe}-{arguments.process_index}.json").write_text(json.dumps(seen))

for recipe in steps:  # the refused one last: its failure ends the run
    train(recipe)
torch.distributed.destroy_process_group()  # else gloo's threads may abort the interpreter's exit
"""


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One torchrun, two CPU processes, that trains the Trainer recipes of docs/loader.md in turn on one small output
    (5 of the sample's documents at max_len 64, about 3,000 tokens): the balanced one, the plain one for one epoch,
    then a dataset split by rank, which is refused (the process fails). One launch, not one per recipe: starting
    torch, transformers and gloo in two processes is most of the cost. Returns its directory, the finished process,
    the output's row count and the balanced placement's rows in order."""
    import subprocess
    import sys

    work = tmp_path_factory.mktemp("torchrun")
    corpus = write_jsonl(work / "corpus.jsonl", read_jsonl(SAMPLE)[:5])
    pack_corpus([str(corpus)], PackOptions(max_len=64, overflow="split"), work / "packed")
    rows = PackedDataset(work / "packed").num_rows
    placement = PackedDataset(work / "packed", seed=0, batch_size=2, grad_accum=2,
                              balance=RowCost(per_token=1.0, per_square=1.0), balance_ranks=2)  # fmt: skip
    placed = [row["row_index"] for row in placement]
    # one epoch for the plain recipe (4 rows a process a step); whole global batches for the balanced one
    steps = {"balanced": len(placed) // 8, "accelerate": -(-rows // 8), "dataset": -(-rows // 8)}
    assert 5 <= steps["accelerate"] <= 30, rows
    script = work / "train.py"
    script.write_text(TRAINER_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
         str(work / "packed"), str(work), json.dumps(steps), json.dumps(TRAIN_CONFIG)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return {"work": work, "done": done, "rows": rows, "placed": placed, "steps": steps}


def seen_by(two_processes: dict[str, Any], recipe: str) -> list[Any]:
    """What each of the two processes trained on with ``recipe``: a list per process, or the run's stderr's tail."""
    files = [two_processes["work"] / f"seen-{recipe}-{k}.json" for k in (0, 1)]
    assert all(file.exists() for file in files), two_processes["done"].stderr[-3000:]
    return [json.loads(file.read_text()) for file in files]


@pytest.mark.xdist_group("torchrun")
def test_a_trainer_on_two_processes_trains_every_row_once_an_epoch_with_the_documented_recipe(
    two_processes: dict[str, Any],
) -> None:
    """torchrun, two CPU processes, the Trainer: accelerate hands the rows of an iterable dataset out among the
    processes itself (process 0 reads and dispatches them), so the dataset must not split them by rank as well:
    built with rank=0, world_size=1 (docs/loader.md) every row is trained on once in an epoch; built after
    torch.distributed with the default rank and world size, where process 0's half of the rows was all that both
    processes trained on, it is refused."""
    rows, done = two_processes["rows"], two_processes["done"]
    trained = [row for process in seen_by(two_processes, "accelerate") for batch in process for row in batch]
    # every row, and at most a few again: accelerate may fill the last step's batches with rows from the start
    assert set(trained) == set(range(rows)) and rows <= len(trained) < rows + 8
    # the default, rank k of 2 from torch.distributed: refused before a step, saying the fix
    assert done.returncode != 0 and not list(two_processes["work"].glob("seen-dataset-*"))
    assert "keeps rank 0's rows of 2 ranks, and accelerate" in done.stderr
    assert "build it with rank=0, world_size=1 there" in done.stderr


@pytest.mark.xdist_group("torchrun")
def test_a_trainer_on_two_processes_trains_the_balanced_placement_with_the_documented_recipe(
    two_processes: dict[str, Any],
) -> None:
    """torchrun, two CPU processes, the Trainer with the balanced recipe of docs/loader.md (balance_ranks=2,
    dispatch_batches=False): process r trains micro-batch r of each micro-step of the placement, and the Trainer's
    own num_items_in_batch equals the batches'."""
    placed, steps = two_processes["placed"], two_processes["steps"]["balanced"]
    seen = seen_by(two_processes, "balanced")
    for process in (0, 1):
        trained = [batch for batch, _, _ in seen[process]]
        assert trained == [placed[(2 * k + process) * 2 : (2 * k + process + 1) * 2] for k in range(2 * steps)]
        assert all(ours == theirs for _, ours, theirs in seen[process])
