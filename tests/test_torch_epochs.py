"""The loader over epochs: a second pass is the next epoch, the documented resume loop resumes exactly (with and
without workers, and under torchdata's StatefulDataLoader), a plain DataLoader with workers delivers every row once
per epoch but refuses a state (persistent workers too, each epoch in its order), every row once per epoch across ranks
and a resume anywhere (a property), and rows are views into the memory map (no pandas) whatever the number of record
batches."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch", reason="the loader needs the torch extra")
from conftest import REPO, SAMPLE, read_jsonl, write_jsonl  # noqa: E402
from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from packcli.errors import PackcliError  # noqa: E402
from packcli.format.manifest import read_manifest  # noqa: E402
from packcli.loader.balance import balance_batches, global_batches, rank_rows, slot_costs, step_imbalance  # noqa: E402
from packcli.options import PackOptions  # noqa: E402
from packcli.run.driver import pack_corpus  # noqa: E402
from packcli.torch import PackedDataset, PackedLoader, RowCost, collate_varlen, loader  # noqa: E402

BATCH = 30


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("epochs")
    corpus = write_jsonl(folder / "corpus.jsonl", read_jsonl(SAMPLE)[:12])  # a few hundred rows: fast epochs
    pack_corpus([str(corpus)], PackOptions(max_len=96, shard_size=60_000), folder / "packed")
    return folder / "packed"


def rows_of(batches: Any) -> list[list[int]]:
    return [batch["row_index"].tolist() for batch in batches]


def flat(batches: list[list[int]]) -> list[int]:
    return [row for batch in batches for row in batch]


def test_a_second_for_loop_runs_the_next_epoch(packed: Path) -> None:
    dataset = PackedDataset(packed, seed=3)
    first = [row["row_index"] for row in dataset]
    assert (dataset.epoch, dataset.consumed) == (1, 0)
    second = [row["row_index"] for row in dataset]
    assert len(second) == len(first) == len(dataset) == dataset.num_rows
    assert second != first and sorted(second) == sorted(first)
    epoch_one = PackedDataset(packed, seed=3)
    epoch_one.set_epoch(1)
    assert second == epoch_one.rank_rows().tolist() and dataset.epoch == 2
    dataset.set_epoch(0)  # back to the start of an earlier epoch: the same order again
    assert [row["row_index"] for row in dataset] == first


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_passes_follow_the_epochs(packed: Path, workers: int) -> None:
    batches = loader(packed, batch_size=BATCH, num_workers=workers, seed=1)
    passes = [flat(rows_of(batches)) for _ in range(2)]
    dataset = PackedDataset(packed, seed=1)
    expected = []
    for epoch in range(2):
        dataset.set_epoch(epoch)
        expected.append(dataset.rank_rows().tolist())
    assert passes == expected and batches.epoch == 2


def documented_loop(batches: PackedLoader, epochs: int, stop_after: int | None = None) -> tuple[list[Any], Any]:
    """The training loop of docs/loader.md; returns the batches seen and, when stopped, the checkpointed state."""
    seen = []
    for epoch in range(batches.epoch, epochs):
        batches.set_epoch(epoch)
        for batch in batches:
            seen.append(batch["row_index"].tolist())
            if len(seen) == stop_after:
                return seen, batches.state_dict()
    return seen, None


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("where", ["mid-epoch", "epoch end"])
def test_the_documented_loop_resumes_exactly(packed: Path, workers: int, where: str) -> None:
    make = partial(loader, packed, batch_size=BATCH, num_workers=workers, seed=1)
    full, _ = documented_loop(make(), epochs=3)
    per_epoch = len(make())
    stop = per_epoch + (3 if where == "mid-epoch" else per_epoch)
    first, state = documented_loop(make(), epochs=3, stop_after=stop)
    resumed = make()
    resumed.load_state_dict(json.loads(json.dumps(state)))  # a checkpoint round trip
    rest, _ = documented_loop(resumed, epochs=3)
    assert first + rest == full
    assert len(full) == 3 * per_epoch


@pytest.mark.parametrize("dataset_batch", [BATCH, 1])
def test_a_plain_dataloader_with_workers_delivers_each_row_once(packed: Path, dataset_batch: int) -> None:
    in_process = [row["row_index"] for row in PackedDataset(packed, seed=4)]  # num_workers=0: this rank's order
    dataset = PackedDataset(packed, seed=4, batch_size=dataset_batch)
    plain = DataLoader(dataset, batch_size=BATCH, num_workers=2, collate_fn=collate_varlen)
    first = flat(rows_of(plain))
    if dataset_batch == BATCH:  # workers take the DataLoader's batches in turn: the rank's order exactly
        assert first == in_process
    assert sorted(first) == sorted(in_process) == list(range(dataset.num_rows))
    dataset.set_epoch(1)  # what the Hugging Face Trainer calls each epoch
    second = flat(rows_of(plain))
    assert second != first and sorted(second) == sorted(first)
    # Only what cannot be exact is refused: the workers never said which rows were used.
    for call in (dataset.state_dict, lambda: dataset.load_state_dict({})):
        with pytest.raises(PackcliError, match=r"packcli\.torch\.loader.*StatefulDataLoader"):
            call()


def test_persistent_workers_serve_each_epoch_the_main_process_sets(packed: Path) -> None:
    dataset = PackedDataset(packed, seed=4, batch_size=BATCH)
    plain = DataLoader(dataset, batch_size=BATCH, num_workers=2, persistent_workers=True, collate_fn=collate_varlen)
    passes = []
    for epoch in range(3):  # what the Hugging Face Trainer does with dataloader_persistent_workers=True
        dataset.set_epoch(epoch)
        passes.append(flat(rows_of(plain)))  # the workers are the same processes every pass
    for epoch, rows in enumerate(passes):
        expected = PackedDataset(packed, seed=4)
        expected.set_epoch(epoch)
        assert rows == expected.rank_rows().tolist()  # was: every row in epoch 0, then none at all
    assert passes[0] != passes[1] != passes[2]


@settings(max_examples=40)
@given(
    world_size=st.integers(1, 9),
    batch_size=st.integers(1, 50),
    drop_last=st.booleans(),
    seed=st.integers(0, 3),
    epoch=st.integers(0, 3),
    stop=st.floats(0, 1),
)
@example(world_size=1, batch_size=1, drop_last=False, seed=0, epoch=0, stop=1.0)  # a state taken at the epoch's end
def test_every_row_once_per_epoch_across_ranks_and_a_resume_anywhere(
    packed: Path, world_size: int, batch_size: int, drop_last: bool, seed: int, epoch: int, stop: float
) -> None:
    options = {"world_size": world_size, "batch_size": batch_size, "drop_last": drop_last, "seed": seed}
    served, total = [], PackedDataset(packed).num_rows
    for rank in range(world_size):
        try:
            first = PackedDataset(packed, rank=rank, **options)
        except ValueError:  # no full batch per rank: refused, checked in test_loader_guards
            assert drop_last and total // world_size < batch_size
            return
        first.set_epoch(epoch)
        order = first.rank_rows().tolist()
        cut = int(stop * len(first))
        before = [row["row_index"] for _, row in zip(range(cut), first)]
        resumed = PackedDataset(packed, rank=rank, **options)
        resumed.load_state_dict(first.state_dict())
        after = [row["row_index"] for row in resumed] if cut < len(first) else []
        assert before + after == order and len(order) == len(first)
        assert (resumed if after else first).epoch == epoch + 1  # the epoch's last row moves it on
        served += before + after
    assert len(served) == len(set(served)) == total - first.dropped_rows
    same, other = (PackedDataset(packed, rank=0, **{**options, "seed": value}) for value in (seed, seed + 1))
    same.set_epoch(epoch)
    other.set_epoch(epoch)
    assert other.rank_rows().tolist() != same.rank_rows().tolist()  # another seed, another order


def test_a_worker_state_needs_its_worker(packed: Path) -> None:
    dataset = PackedDataset(packed)
    state = {**dataset.state_dict(), "worker": {"id": 1, "num_workers": 2, "taken": 30}}
    with pytest.raises(PackcliError, match="worker"):
        dataset.load_state_dict(state)
    with pytest.raises(PackcliError, match="seed"):
        dataset.load_state_dict({**dataset.state_dict(), "seed": 9})


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_exactly(packed: Path, workers: int) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader", reason="needs torchdata (the dev extra)")

    def make() -> Any:
        dataset = PackedDataset(packed, seed=2, batch_size=BATCH)
        with warnings.catch_warnings():  # torchdata 0.11 calls a deprecated torch function in its constructor
            warnings.simplefilter("ignore", UserWarning)
            return stateful.StatefulDataLoader(
                dataset, batch_size=BATCH, num_workers=workers, collate_fn=collate_varlen
            )

    full = rows_of(make())
    interrupted = make()
    taken = []
    for batch in interrupted:
        taken.append(batch["row_index"].tolist())
        if len(taken) == 5:
            break
    state = interrupted.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    assert taken + rows_of(resumed) == full
    assert sorted(flat(full)) == list(range(PackedDataset(packed).num_rows))


MEMORY_SCRIPT = """
import json, sys
from pathlib import Path
from packcli.torch import PackedDataset, collate_varlen

def anon():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("RssAnon:"))

before, peak, tokens = anon(), 0, 0
dataset = PackedDataset(Path(sys.argv[1]), shuffle=False)
for index in range(dataset.num_rows):
    row = dataset.row(index)
    tokens += int(row["input_ids"].sum() % 7) + len(row["input_ids"])  # touch every token
    if index % 50 == 0:
        peak = max(peak, anon() - before)
growth = max(peak, anon() - before)
collate_varlen([dataset.row(index) for index in range(8)])
print(json.dumps({"growth": growth, "tokens": tokens, "pandas": "pandas" in sys.modules}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RssAnon from /proc (Linux)")
def test_reading_rows_copies_nothing_and_imports_no_pandas(tmp_path: Path) -> None:
    out = tmp_path / "packed"
    pack_corpus([str(SAMPLE)], PackOptions(max_len=2048), out)
    shards = read_manifest(out)["shards"]
    batches = sum(len(pa.ipc.open_stream(pa.memory_map(str(out / s["file"]))).read_all().to_batches()) for s in shards)
    assert batches > len(shards)  # the shards really hold several record batches
    shard_bytes = sum(s["bytes"] for s in shards)
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(out)], capture_output=True, text=True, check=True, cwd=REPO
    )
    measured = json.loads(result.stdout)
    growth = measured["growth"]
    assert not measured["pandas"]  # pyarrow's to_numpy imports it: ~27 MiB in every process and worker
    # A copy of the columns would add about the shards' size; views add only the interpreter's small change.
    assert growth < shard_bytes / 8, (
        f"reading every row grew anonymous memory by {growth} bytes ({shard_bytes} in shards)"
    )


COST = RowCost(per_token=100.0, per_square=1.0)  # attention a large share at max_len 96: the placement has work


def costs_by_a_plain_loop(dataset: PackedDataset, cost: RowCost) -> np.ndarray:
    """The oracle: every row's cost from its documents, one row at a time."""
    return np.array(
        [
            sum(cost.per_token * n + cost.per_square * n * n for n in np.diff(dataset.row(i)["cu_seqlens"]).tolist())
            for i in range(dataset.num_rows)
        ]
    )


@pytest.mark.parametrize(("world_size", "batch_size", "grad_accum"), [(3, 2, 2), (2, 1, 4), (4, 3, 1)])
def test_balanced_order_places_each_global_batch_and_keeps_the_plain_tail(
    packed: Path, world_size: int, batch_size: int, grad_accum: int
) -> None:
    options = {"world_size": world_size, "batch_size": batch_size, "seed": 5}
    plain = [PackedDataset(packed, rank=rank, **options) for rank in range(world_size)]
    balanced = [PackedDataset(packed, rank=rank, grad_accum=grad_accum, balance=COST, **options)
                for rank in range(world_size)]  # fmt: skip
    for dataset in (*plain, *balanced):
        dataset.set_epoch(1)
    costs = costs_by_a_plain_loop(plain[0], COST)
    rank_major = np.concatenate([dataset.rank_rows() for dataset in plain])
    slots = global_batches(rank_major, world_size, batch_size, grad_accum)
    placed = np.take_along_axis(slots, balance_batches(slot_costs(costs, slots), world_size, batch_size), 1)
    whole, served = slots.size // world_size, []
    for rank, dataset in enumerate(balanced):
        rows = dataset.rank_rows()
        assert rows[:whole].tolist() == rank_rows(placed, rank, world_size, batch_size).tolist()
        assert rows[whole:].tolist() == plain[rank].rank_rows()[whole:].tolist()  # the tail, as without balance
        served += [row["row_index"] for row in dataset]  # what the dataset delivers (and the epoch moves on)
        assert served[-len(rows) :] == rows.tolist()
    assert sorted(served) == sorted(rank_major.tolist())  # every row once in the epoch
    again = np.concatenate([rank_rows(placed, rank, world_size, batch_size) for rank in range(world_size)])
    assert sorted(again.tolist()) == sorted(slots.reshape(-1).tolist())
    assert step_imbalance(slot_costs(costs, placed), world_size, batch_size) <= step_imbalance(
        slot_costs(costs, slots), world_size, batch_size
    )


def balanced_loader(packed: Path, workers: int = 0, **options: Any) -> PackedLoader:
    defaults = {"seed": 1, "rank": 1, "world_size": 2, "grad_accum": 3, "balance": COST}
    return loader(packed, batch_size=4, num_workers=workers, **{**defaults, **options})


@pytest.mark.parametrize("workers", [0, 2])
def test_the_documented_loop_resumes_exactly_with_balance(packed: Path, workers: int) -> None:
    full, _ = documented_loop(balanced_loader(packed, workers), epochs=2)
    per_epoch = len(balanced_loader(packed))
    first, state = documented_loop(balanced_loader(packed, workers), epochs=2, stop_after=per_epoch + 5)
    resumed = balanced_loader(packed, workers)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    rest, _ = documented_loop(resumed, epochs=2)
    assert first + rest == full and len(full) == 2 * per_epoch
    plain, _ = documented_loop(balanced_loader(packed, workers, balance=None), epochs=2)
    assert full != plain  # rows move between ranks inside a global batch: checked in the test above


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_exactly_with_balance(packed: Path, workers: int) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader", reason="needs torchdata (the dev extra)")

    def make() -> Any:
        dataset = PackedDataset(packed, seed=2, batch_size=3, grad_accum=2, balance=COST, rank=0, world_size=2)
        with warnings.catch_warnings():  # torchdata 0.11 calls a deprecated torch function in its constructor
            warnings.simplefilter("ignore", UserWarning)
            return stateful.StatefulDataLoader(dataset, batch_size=3, num_workers=workers, collate_fn=collate_varlen)

    full = rows_of(make())
    interrupted = make()
    taken = []
    for batch in interrupted:
        taken.append(batch["row_index"].tolist())
        if len(taken) == 5:
            break
    resumed = make()
    resumed.load_state_dict(interrupted.state_dict())
    assert taken + rows_of(resumed) == full


@pytest.mark.parametrize(
    ("taken", "loaded", "phrase"),
    [
        ({}, {"balance": COST}, "the state has balance=None, this dataset {'per_token': 100.0"),
        ({"balance": COST}, {}, "the state has balance={'per_token': 100.0, 'per_square': 1.0}, this dataset None"),
        ({"balance": COST}, {"balance": RowCost(per_token=100.0, per_square=2.0)}, "the state has balance="),
        ({"balance": COST, "grad_accum": 2}, {"balance": COST, "grad_accum": 4}, "the state has grad_accum=2, this"),
    ],
)
def test_a_state_of_another_balance_is_refused(
    packed: Path, taken: dict[str, Any], loaded: dict[str, Any], phrase: str
) -> None:
    first = PackedDataset(packed, batch_size=2, **taken)
    next(iter(first))
    state = json.loads(json.dumps(first.state_dict()))
    other = PackedDataset(packed, batch_size=2, **loaded)
    with pytest.raises(PackcliError, match=r"^cannot resume: ") as refused:
        other.load_state_dict(state)
    assert phrase in str(refused.value) and (other.epoch, other.consumed) == (0, 0)
    old = {key: value for key, value in state.items() if key not in ("balance", "grad_accum", "balance_ranks")}
    if not taken:  # a state taken before balance existed means no balance
        PackedDataset(packed, batch_size=2).load_state_dict(old)


def test_without_balance_the_state_keeps_its_keys_and_grad_accum_alone_changes_no_row(packed: Path) -> None:
    plain, counted = PackedDataset(packed, seed=3), PackedDataset(packed, seed=3, grad_accum=4)
    assert plain.rank_rows().tolist() == counted.rank_rows().tolist()
    assert {**plain.state_dict(), "grad_accum": 4} == counted.state_dict()
    assert "num_items_in_batch" not in next(iter(plain)) and "num_items_in_batch" in next(iter(counted))
    PackedDataset(packed, seed=3).load_state_dict(counted.state_dict())  # grad_accum alone moves no row


@pytest.mark.parametrize(
    ("output", "balance", "layout"),
    [("packed", COST, "varlen"), ("packed", None, "varlen"), ("packed_sft", COST, "padded")],
)
def test_num_items_in_batch_is_the_supervised_count_of_the_whole_global_batch(
    request: pytest.FixtureRequest, output: str, balance: RowCost | None, layout: str
) -> None:
    """Text rows (labels from input_ids) and prompt/response rows (a labels column with -100 on prompts)."""
    world_size, grad_accum, packed = 2, 3, request.getfixturevalue(output)
    per_rank = [list(balanced_loader(packed, rank=rank, balance=balance, layout=layout)) for rank in range(world_size)]
    assert len(per_rank[0]) == len(per_rank[1])
    for step in range(0, len(per_rank[0]), grad_accum):  # the tail: one short step of the leftover batches
        batches = [batch for rank in per_rank for batch in rank[step : step + grad_accum]]
        supervised = sum(int((batch["labels"] != -100).sum()) for batch in batches)
        assert {int(batch["num_items_in_batch"]) for batch in batches} == {supervised}


@pytest.mark.parametrize("batch_size", [1, 2])
def test_balance_ranks_deliver_whole_balanced_steps_in_the_order_accelerate_hands_them_out(
    packed: Path, batch_size: int
) -> None:
    """Under the Trainer (rank=0, world_size=1) accelerate gives process r the batches r, r + W, r + 2W, ... of the
    dataset: with balance_ranks=W each global batch is W * B * A consecutive rows of the seeded order, balanced for
    W ranks, delivered micro-step by micro-step, rank by rank."""
    ranks, grad_accum = 3, 2
    dataset = PackedDataset(packed, seed=2, batch_size=batch_size, grad_accum=grad_accum, balance=COST,
                            balance_ranks=ranks)  # fmt: skip
    costs, order = costs_by_a_plain_loop(dataset, COST), PackedDataset(packed, seed=2).rank_rows()
    slots = global_batches(order, 1, ranks * batch_size, grad_accum)  # consecutive rows, in the slots of W ranks
    placed = np.take_along_axis(slots, balance_batches(slot_costs(costs, slots), ranks, batch_size), 1)
    delivered = list(dataset)
    rows = [row["row_index"] for row in delivered]
    assert rows[: placed.size] == placed.reshape(-1).tolist() and rows[placed.size :] == order[placed.size :].tolist()
    step = placed.shape[1]  # num_items_in_batch: the supervised tokens of the W processes' global batch
    for start in range(0, len(delivered), step):
        batch = collate_varlen(delivered[start : start + step])
        assert int(batch["num_items_in_batch"]) == int((batch["labels"] != -100).sum())
    with pytest.raises(ValueError, match=r"balance_ranks=3 is for a dataset that accelerate hands out"):
        PackedDataset(packed, rank=0, world_size=2, balance=COST, balance_ranks=3)


def test_a_batch_across_two_global_batches_is_refused_by_the_collator(packed_rows: Path) -> None:
    """num_items_in_batch is one global batch's count: a DataLoader whose batch size is not the dataset's mixes two
    global batches in a batch, and the collator says so rather than pick one of their counts."""
    dataset = PackedDataset(packed_rows, seed=0, batch_size=2, grad_accum=1)  # rows of one or several documents
    mixed = DataLoader(dataset, batch_size=3, collate_fn=collate_varlen)
    with pytest.raises(ValueError, match=r"^these rows belong to different global batches .*batch_size"):
        list(mixed)
