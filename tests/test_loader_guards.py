"""The loader refuses what it cannot read right, in one clear error: a state of another output, a manifest edited to
list a shard twice, leave one out or change counts, a truncated shard, arguments out of their range,
options that would serve no row or that a collate function does not take, and a state whose count of rows means
other rows here."""

from __future__ import annotations

import json
import pickle
import re
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the loader needs the torch extra")
from conftest import SAMPLE, read_jsonl, write_jsonl  # noqa: E402

from packcli.errors import PackcliError  # noqa: E402
from packcli.options import PackOptions  # noqa: E402
from packcli.run.driver import pack_corpus  # noqa: E402
from packcli.torch import PackedDataset, collate_varlen, loader  # noqa: E402


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """One corpus packed twice, with --seed 0 and --seed 7, into several shards each."""
    folder = tmp_path_factory.mktemp("guards")
    corpus = write_jsonl(folder / "corpus.jsonl", read_jsonl(SAMPLE)[:12])
    for seed in (0, 7):
        pack_corpus([str(corpus)], PackOptions(max_len=96, shard_size=60_000, seed=seed), folder / f"seed{seed}")
    return {seed: folder / f"seed{seed}" for seed in (0, 7)}


def test_a_state_of_another_output_is_refused(outputs: dict[int, Path]) -> None:
    taken_on, other = PackedDataset(outputs[0], seed=1), PackedDataset(outputs[7], seed=1)
    assert taken_on.num_rows == other.num_rows  # same corpus, same row count: only the output tells them apart
    for _, _row in zip(range(40), taken_on):
        pass
    state = taken_on.state_dict()
    with pytest.raises(PackcliError, match="cannot resume: the state is of output"):
        other.load_state_dict(state)
    again = PackedDataset(outputs[0], seed=1)
    again.load_state_dict(state)  # the output it was taken on resumes it
    assert (again.epoch, again.consumed) == (0, 40)


def edited(source: Path, target: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    shutil.copytree(source, target)
    manifest = json.loads((target / "manifest.json").read_text())
    edit(manifest)
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def list_first_shard_twice(manifest: dict[str, Any]) -> None:
    manifest["shards"][1] = dict(manifest["shards"][0])


def leave_out_last_shard(manifest: dict[str, Any]) -> None:
    gone = manifest["shards"].pop()
    manifest["totals"]["sequences"] -= gone["rows"]  # totals made consistent: the unlisted file still shows
    manifest["totals"]["tokens"] -= gone["tokens"]


def drop_last_shard_from_the_list(manifest: dict[str, Any]) -> None:
    manifest["shards"].pop()


def claim_more_rows(manifest: dict[str, Any]) -> None:
    manifest["shards"][0]["rows"] += 5
    manifest["totals"]["sequences"] += 5


def claim_fewer_tokens(manifest: dict[str, Any]) -> None:
    manifest["shards"][1]["tokens"] -= 1
    manifest["totals"]["tokens"] -= 1


def claim_more_total_tokens(manifest: dict[str, Any]) -> None:
    manifest["totals"]["tokens"] += 1


def claim_more_documents(manifest: dict[str, Any]) -> None:
    manifest["shards"][0]["documents"] += 3  # the rows and tokens as they are: cu_seqlens tells the documents
    manifest["totals"]["documents"] += 3


def claim_fewer_total_documents(manifest: dict[str, Any]) -> None:
    manifest["totals"]["documents"] -= 1


def claim_a_longer_max_len(manifest: dict[str, Any]) -> None:
    manifest["max_len"] *= 2  # the padded layout's width, from the manifest


def claim_another_eos(manifest: dict[str, Any]) -> None:
    manifest["tokenizer"]["eos_id"] = 0  # the pad id, from the manifest


def claim_another_tokenizer(manifest: dict[str, Any]) -> None:
    manifest["tokenizer"]["sha256"] = "0" * 64


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (claim_a_longer_max_len, "max_len"),
        (claim_another_eos, "tokenizer.eos_id"),
        (claim_another_tokenizer, "tokenizer.sha256"),
        (list_first_shard_twice, "shards"),
        (leave_out_last_shard, "shards"),
        (drop_last_shard_from_the_list, "shards"),
        (claim_more_rows, "shards[0].rows"),
        (claim_fewer_tokens, "shards[1].tokens"),
        (claim_more_total_tokens, "totals.tokens"),
        (claim_more_documents, "shards[0].documents"),
        (claim_fewer_total_documents, "totals.documents"),
    ],
)
def test_an_edited_manifest_is_refused_naming_the_key(
    outputs: dict[int, Path], tmp_path: Path, edit: Callable[[dict[str, Any]], None], key: str
) -> None:
    out = edited(outputs[0], tmp_path / "edited", edit)
    with pytest.raises(PackcliError, match=rf"manifest key '{re.escape(key)}'.*packcli verify") as raised:
        PackedDataset(out)
    assert "\n" not in str(raised.value) and "manifest.json" in str(raised.value)


def test_a_truncated_shard_names_the_file(outputs: dict[int, Path], tmp_path: Path) -> None:
    out = shutil.copytree(outputs[0], tmp_path / "truncated")
    shard = out / json.loads((out / "manifest.json").read_text())["shards"][1]["file"]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with pytest.raises(PackcliError, match="unreadable shard") as raised:
        PackedDataset(out)
    assert raised.value.path == str(shard)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"world_size": 0, "rank": 0}, r"world_size must be an integer >= 1 .*, not 0"),
        ({"world_size": 2, "rank": 2}, r"rank 2 is not in 0\.\.1"),
        ({"seed": -1}, r"seed must be an integer >= 0 .*, not -1"),
        ({"batch_size": 0}, r"batch_size must be an integer >= 1 .*, not 0"),
        ({"batch_size": -1}, r"batch_size must be an integer >= 1 .*, not -1"),
    ],
)
def test_arguments_out_of_range_say_the_range(
    outputs: dict[int, Path], arguments: dict[str, int], message: str
) -> None:
    for make in (PackedDataset, lambda path, **kw: loader(path, **{"batch_size": 4, **kw})):
        with pytest.raises(ValueError, match=message):
            make(outputs[0], **arguments)
    with pytest.raises(ValueError, match=r"epoch must be an integer >= 0"):
        PackedDataset(outputs[0]).set_epoch(-1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bogus": 1}, r"unknown option 'bogus'"),
        ({"layout": "padded", "pad_to_multiple_of": 8}, r"unknown option 'pad_to_multiple_of' for layout='padded'"),
    ],
)
def test_an_option_the_collate_function_does_not_take_is_refused_when_the_loader_is_built(
    outputs: dict[int, Path], options: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):  # not a TypeError from deep inside the first batch
        loader(outputs[0], batch_size=4, **options)


def test_the_loader_checks_its_arguments_before_it_opens_or_fetches_the_output(tmp_path: Path) -> None:
    nowhere = tmp_path / "not-yet-packed"  # opening it would fail too, but the argument is the first fault
    with pytest.raises(ValueError, match=r"unknown layout 'bogus'; use 'varlen' or 'padded'") as refused:
        loader(nowhere, batch_size=4, layout="bogus")  # a ValueError, as every other argument (issue 37)
    assert not isinstance(refused.value, PackcliError)
    with pytest.raises(ValueError, match=r"needs layout='varlen'"):
        loader(nowhere, batch_size=4, layout="padded", cp_size=2, cp_rank=0, rank=0, world_size=1)
    with pytest.raises(RuntimeError, match=r"device"):
        loader(nowhere, batch_size=4, device="gpu:0")


def test_more_ranks_than_rows_is_refused_rather_than_serving_nothing(outputs: dict[int, Path]) -> None:
    rows = PackedDataset(outputs[0]).num_rows
    with pytest.raises(ValueError, match=rf"world_size={rows + 1} .* the output has {rows} rows"):
        PackedDataset(outputs[0], rank=0, world_size=rows + 1)
    with pytest.raises(ValueError, match=rf"drop_last .* batch_size={rows + 1}"):
        loader(outputs[0], batch_size=rows + 1, drop_last=True)
    assert len(PackedDataset(outputs[0], rank=rows - 1, world_size=rows)) == 1  # one row each is enough


def test_a_state_is_refused_where_its_rows_would_be_counted_otherwise(outputs: dict[int, Path]) -> None:
    state = PackedDataset(outputs[0], batch_size=8).state_dict()
    other_batch = PackedDataset(outputs[0], batch_size=5)
    other_batch.load_state_dict(state)  # the state counts rows: another batch size resumes at the same row
    with pytest.raises(PackcliError, match=r"cannot resume: the state has drop_last=False, this dataset True"):
        PackedDataset(outputs[0], batch_size=8, drop_last=True).load_state_dict(state)
    dropping = PackedDataset(outputs[0], batch_size=8, drop_last=True).state_dict()
    with pytest.raises(PackcliError, match=r"cannot resume: the state has batch_size=8, this dataset 5"):
        PackedDataset(outputs[0], batch_size=5, drop_last=True).load_state_dict(dropping)


def load_worker_state(state: dict[str, Any], taken: int, refusals: Path, worker_id: int) -> None:
    """A DataLoader ``worker_init_fn``: load into this worker's copy of the dataset its own state, as torchdata's
    StatefulDataLoader does; a refusal is written to ``refusals/WORKER`` (a worker that raises takes seconds to
    reap) and the worker then serves its share from the start."""
    dataset = torch.utils.data.get_worker_info().dataset
    try:
        dataset.load_state_dict({**state, "worker": {"id": worker_id, "num_workers": 2, "taken": taken}})
    except PackcliError as error:
        (refusals / str(worker_id)).write_text(str(error))


def resumed_in_workers(dataset: PackedDataset, state: dict[str, Any], taken: int, refusals: Path) -> list[int]:
    """The rows two DataLoader workers serve, each after loading ``state`` with ``taken`` rows of its share."""
    workers = torch.utils.data.DataLoader(
        dataset,
        batch_size=dataset.batch_size,
        num_workers=2,
        collate_fn=collate_varlen,
        worker_init_fn=partial(load_worker_state, state, taken, refusals),
    )
    return [i for batch in workers for i in batch["row_index"].tolist()]


def test_a_worker_state_of_another_batch_size_is_refused(outputs: dict[int, Path], tmp_path: Path) -> None:
    taken_at = PackedDataset(outputs[0], batch_size=8).state_dict()  # each worker's count is of blocks of 8 rows
    same = PackedDataset(outputs[0], batch_size=8)  # the same batch size resumes, also a worker that took no row yet
    assert resumed_in_workers(same, taken_at, 0, tmp_path) == same.rank_rows().tolist()
    assert not list(tmp_path.iterdir())
    resumed_in_workers(PackedDataset(outputs[0], batch_size=7), taken_at, 8, tmp_path)  # blocks of 7: other rows
    refusals = sorted(path.read_text() for path in tmp_path.iterdir())
    assert refusals == ["cannot resume: the state has batch_size=8, this dataset 7"] * 2


def test_a_worker_that_finds_another_output_at_the_path_refuses_it(outputs: dict[int, Path], tmp_path: Path) -> None:
    out = shutil.copytree(outputs[0], tmp_path / "out")
    dataset = PackedDataset(out, seed=1)
    worker = pickle.loads(pickle.dumps(dataset))  # what a spawned DataLoader worker gets: it maps the shards itself
    shutil.rmtree(out)
    shutil.copytree(outputs[7], out)  # the output was packed again (--seed 7) while training ran: same row count
    assert PackedDataset(out).num_rows == dataset.num_rows
    with pytest.raises(PackcliError, match=r"the output changed since this dataset was built"):
        worker.row(0)
    assert dataset.row(0)["input_ids"] is not None  # this process' own map is of the files it opened


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"consumed": -5}, r"consumed=-5 is not in 0\.\.\d+"),
        ({"consumed": 10**6}, r"consumed=1000000 is not in 0\.\.\d+"),
        ({"epoch": -1}, r"epoch=-1 is not an integer >= 0"),
        ({"epoch": "2"}, r"epoch='2' is not an integer >= 0"),
        ({"worker": {"id": 0, "num_workers": 2, "taken": 3}}, r"worker"),
        ({"seed": 9}, r"seed"),
        ({"version": 3}, r"the state is of version 3, newer than this packcli reads \(2\)"),
        ({"version": "2"}, r"the state's version='2' is not an integer"),
        ({"version": None}, r"the state's version=None is not an integer"),
    ],
)
def test_a_refused_state_leaves_the_position_as_it_was(
    outputs: dict[int, Path], change: dict[str, Any], message: str
) -> None:
    dataset = PackedDataset(outputs[0], seed=1)
    for _, _row in zip(range(10), dataset):
        pass
    taken = PackedDataset(outputs[0], seed=1)
    taken.set_epoch(3)
    for _, _row in zip(range(20), taken):
        pass
    state = taken.state_dict()
    with pytest.raises(PackcliError, match=f"cannot resume: .*{message}"):
        dataset.load_state_dict({**state, **change})
    assert (dataset.epoch, dataset.consumed) == (0, 10)  # not half applied
    dataset.load_state_dict(state)
    assert (dataset.epoch, dataset.consumed) == (3, 20)


@pytest.mark.parametrize("given", [{"rank": 1}, {"world_size": 2}])
def test_a_rank_without_a_world_size_or_the_reverse_is_refused(outputs: dict[int, Path], given: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=r"pass both rank= and world_size="):  # was: rank 0 of 1, every row
        PackedDataset(outputs[0], **given)


def test_numpy_integers_for_an_epoch_or_a_position_are_integers(outputs: dict[int, Path]) -> None:
    import numpy as np

    dataset = PackedDataset(outputs[0], seed=1)
    dataset.set_epoch(np.int64(2))  # an epoch counted by numpy
    state = dataset.state_dict()
    assert type(state["epoch"]) is int  # a state of plain ints: JSON and torch.save alike
    again = PackedDataset(outputs[0], seed=1)
    again.load_state_dict({**state, "consumed": np.int64(4)})
    assert (again.epoch, again.consumed) == (2, 4)


def test_a_state_is_json_whatever_integers_the_options_were_given_as(outputs: dict[int, Path]) -> None:
    import numpy as np

    numbers = {"rank": np.int64(1), "world_size": np.int64(2), "seed": np.int64(3), "batch_size": np.int32(4)}
    numbers |= {"shuffle": np.bool_(True)}
    state = json.loads(json.dumps(PackedDataset(outputs[0], **numbers).state_dict()))  # a checkpoint as JSON
    PackedDataset(outputs[0], rank=1, world_size=2, seed=3, batch_size=4).load_state_dict(state)


def test_a_state_whose_row_order_is_not_this_ones_is_refused(outputs: dict[int, Path]) -> None:
    dataset = PackedDataset(outputs[0], seed=1)
    for _, _row in zip(range(10), dataset):
        pass
    state = dataset.state_dict()
    other_order = {**state, "order": "0" * 16}  # what numpy's shuffle on another machine or version might give
    with pytest.raises(PackcliError, match=r"cannot resume: the rows of epoch 0 come in another order here"):
        PackedDataset(outputs[0], seed=1).load_state_dict(other_order)
    PackedDataset(outputs[0], seed=1).load_state_dict(state)
    before_the_check = {key: value for key, value in state.items() if key != "order"}
    PackedDataset(outputs[0], seed=1).load_state_dict(before_the_check)


def test_an_output_packed_with_no_eos_opens_in_the_loader_and_stats(tmp_path: Path) -> None:
    """With --no-eos the shards record no EOS (none was appended) while the manifest still names the tokenizer's:
    the listing check holds a shard to the EOS pack appended, not to the tokenizer's."""
    from packcli.report.stats import packed_stats

    corpus = write_jsonl(tmp_path / "corpus.jsonl", read_jsonl(SAMPLE)[:3])
    out = tmp_path / "no-eos"
    pack_corpus([str(corpus)], PackOptions(max_len=96, eos=False), out)
    assert json.loads((out / "manifest.json").read_text())["tokenizer"]["eos_id"] == 50256
    dataset = PackedDataset(out, shuffle=False)
    assert dataset.num_rows > 0 and all(50256 not in dataset.row(k)["input_ids"] for k in range(dataset.num_rows))
    assert packed_stats(out)["documents"] > 0


def test_a_manifest_whose_eos_option_was_edited_is_refused_naming_that_option(tmp_path: Path) -> None:
    """Shards that hold an appended EOS under a manifest saying none was appended (options.eos edited to false):
    the refusal names options.eos, not tokenizer.eos_id, which still reads 50256 there."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", read_jsonl(SAMPLE)[:3])
    out = tmp_path / "eos"
    pack_corpus([str(corpus)], PackOptions(max_len=96), out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["options"]["eos"] = False
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        PackcliError, match=r"manifest key 'options\.eos': options\.eos is false, shard-00000\.arrow was written "
    ):
        PackedDataset(out, shuffle=False).row(0)


def test_a_dataset_split_by_rank_asks_once_whether_accelerate_drives_it(outputs: dict[int, Path]) -> None:
    """The caller's frames are walked for accelerate at the first ``set_epoch`` or iteration only (the caller that
    starts the epochs is the one that drives them), not at every epoch: called first from accelerate's code, a
    dataset split by rank is refused; set by the user's own loop first, it is not asked again."""
    from_accelerate = {"__name__": "accelerate.data_loader"}  # code running as a module of accelerate
    driven = PackedDataset(outputs[0], rank=0, world_size=2)
    with pytest.raises(ValueError, match=r"keeps rank 0's rows of 2 ranks, and accelerate .* rank=0, world_size=1"):
        exec("dataset.set_epoch(0)", {**from_accelerate, "dataset": driven})
    with pytest.raises(ValueError, match=r"keeps rank 0's rows of 2 ranks"):  # a refusal is no answer kept
        exec("next(iter(dataset))", {**from_accelerate, "dataset": driven})
    own = PackedDataset(outputs[0], rank=1, world_size=2)
    own.set_epoch(0)  # the user's own loop (DDP): asked here, once
    exec("dataset.set_epoch(1)", {**from_accelerate, "dataset": own})
    assert own.epoch == 1
