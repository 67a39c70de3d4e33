"""The loader: packed batches give the same logits and losses as documents run alone; ranks, workers, resume."""

from __future__ import annotations

import collections
import json
import math
import shutil
import types
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch", reason="the loader needs the torch extra")
import torch.nn.functional as F  # noqa: E402
from conftest import ROWS_MAX_LEN  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from s3_server import S3Server, put_output  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from packcli.cli import app  # noqa: E402
from packcli.errors import PackcliError  # noqa: E402
from packcli.torch import (  # noqa: E402
    PackedDataset,
    block_causal_mask,
    collate_padded,
    collate_varlen,
    loader,
)

MAX_LEN = ROWS_MAX_LEN  # the max_len of the packed_rows output
SOURCE_KEYS = ("input", "record", "piece", "pieces")  # a document's source in a batch's sources


@pytest.fixture(scope="module")
def packed(packed_rows: Path) -> Path:
    """The session's output packed at max_len 96 (read-only)."""
    return packed_rows


class TinyCausalLM(torch.nn.Module):
    """One attention block with RoPE from position_ids and SDPA with an explicit boolean mask."""

    def __init__(self, vocab: int = 50257, width: int = 32, heads: int = 2) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 64), torch.nn.GELU(), torch.nn.Linear(64, width))
        self.head = torch.nn.Linear(width, vocab)

    def rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        frequencies = 10000 ** (-torch.arange(half, dtype=torch.float32, device=positions.device) / half)
        angles = positions[:, None, :, None].float() * frequencies  # [B, 1, T, half]
        first, second = x[..., :half], x[..., half:]
        return torch.cat(
            [first * angles.cos() - second * angles.sin(), first * angles.sin() + second * angles.cos()], -1
        )

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length = input_ids.shape
        hidden = self.embed(input_ids)
        q, k, v = self.qkv(hidden).view(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(
            self.rope(q, position_ids), self.rope(k, position_ids), v, attn_mask=mask
        )
        hidden = hidden + self.out(attended.transpose(1, 2).reshape(batch, length, -1))
        return self.head(hidden + self.mlp(hidden))


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token loss with the HF shift, over the tokens whose label is not -100."""
    shifted = labels[:, 1:].reshape(-1)
    losses = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), shifted, ignore_index=-100, reduction="none")
    return losses[shifted != -100]


def alone(model: TinyCausalLM, document: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.from_numpy(document.astype(np.int64))[None]
    positions = torch.arange(len(document))[None]
    causal = torch.ones(len(document), len(document), dtype=torch.bool).tril()[None, None]
    logits = model(ids, positions, causal)
    labels = ids.clone()
    labels[0, 0] = -100
    return logits[0], token_losses(logits, labels)


def rows_with_most_documents(dataset: PackedDataset, count: int) -> list[dict]:  # type: ignore[type-arg]
    rows = [dataset.row(i) for i in range(dataset.num_rows)]
    rows.sort(key=lambda row: -len(row["cu_seqlens"]))
    return rows[:count]


@torch.no_grad()
def test_packed_batches_equal_documents_run_alone(packed: Path) -> None:
    model = TinyCausalLM().eval()
    dataset = PackedDataset(packed, shuffle=False)
    rows = rows_with_most_documents(dataset, 6)
    documents = [row["input_ids"][a:b] for row in rows for a, b in zip(row["cu_seqlens"][:-1], row["cu_seqlens"][1:])]
    assert len(documents) > len(rows)  # the rows really hold several documents
    expected = [alone(model, document) for document in documents]

    varlen = collate_varlen(rows)
    logits = model(varlen["input_ids"], varlen["position_ids"], block_causal_mask(varlen["document_ids"]))[0]
    cu = varlen["cu_seqlens"].tolist()
    for (want, _), a, b in zip(expected, cu[:-1], cu[1:]):
        torch.testing.assert_close(logits[a:b], want, atol=1e-5, rtol=0)
    torch.testing.assert_close(
        token_losses(logits[None], varlen["labels"]),
        torch.cat([loss for _, loss in expected]),
        atol=1e-5,
        rtol=0,
    )

    padded = collate_padded(rows, max_len=MAX_LEN)
    logits = model(padded["input_ids"], padded["position_ids"], block_causal_mask(padded["document_ids"]))
    assert not torch.isnan(logits).any()
    got = [logits[k, a:b] for k, row in enumerate(rows) for a, b in zip(row["cu_seqlens"][:-1], row["cu_seqlens"][1:])]
    for (want, _), have in zip(expected, got):
        torch.testing.assert_close(have, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(
        token_losses(logits, padded["labels"]), torch.cat([loss for _, loss in expected]), atol=1e-5, rtol=0
    )


def test_labels_and_positions_against_a_plain_loop(packed: Path) -> None:
    dataset = PackedDataset(packed, shuffle=False)
    rows = rows_with_most_documents(dataset, 4)
    batch = collate_varlen(rows, pad_to_multiple_of=1000, pad_id=7)
    ids, labels, positions = [], [], []
    for row in rows:
        cu = row["cu_seqlens"].tolist()
        for _d, (a, b) in enumerate(zip(cu[:-1], cu[1:])):
            for t in range(a, b):
                ids.append(int(row["input_ids"][t]))
                labels.append(-100 if t == a else int(row["input_ids"][t]))
                positions.append(t - a)
    pad = -len(ids) % 1000
    assert pad > 0
    assert batch["input_ids"][0].tolist() == ids + [7] * pad
    assert batch["labels"][0].tolist() == labels + [-100] * pad
    assert batch["position_ids"][0].tolist() == positions + list(range(pad))
    assert batch["input_ids"].dtype == torch.int64 and batch["cu_seqlens"].dtype == torch.int32
    lengths = np.diff(batch["cu_seqlens"].numpy())
    assert batch["max_seqlen"] == int(lengths.max()) and lengths[-1] == pad
    assert batch["document_ids"][0].tolist() == np.repeat(np.arange(len(lengths)), lengths).tolist()
    fixed = collate_varlen(rows, cu_seqlens_length=200)
    assert fixed["cu_seqlens"].shape == (200,) and fixed["cu_seqlens"][-1] == fixed["input_ids"].shape[1]


def test_block_causal_mask_is_vectorized_and_exact() -> None:
    documents = torch.tensor([[0, 0, 1, 1, 1, -1]])
    mask = block_causal_mask(documents)[0, 0]
    expected = [[i >= j and documents[0, i] == documents[0, j] for j in range(6)] for i in range(6)]
    assert mask.tolist() == expected


def test_ranks_and_workers_are_disjoint_and_equal(packed: Path) -> None:
    total = PackedDataset(packed).num_rows
    seen = []
    for rank in range(3):
        batches = list(loader(packed, batch_size=40, num_workers=2, rank=rank, world_size=3, seed=5))
        rows = [i for batch in batches for i in batch["row_index"].tolist()]
        assert len(batches) == math.ceil((total // 3) / 40)  # every rank: the same number of batches
        assert len(rows) == total // 3
        seen.append(rows)
    flat = [i for rows in seen for i in rows]
    assert len(set(flat)) == len(flat) == total - total % 3
    assert PackedDataset(packed, rank=0, world_size=3).dropped_rows == total % 3


@pytest.mark.parametrize(("world_size", "workers"), [(1, 0), (3, 2)])
def test_drop_last_serves_only_full_batches_each_row_once_and_ends_the_epoch(
    packed: Path, world_size: int, workers: int
) -> None:
    total, batch_size = PackedDataset(packed).num_rows, 40
    served = []
    for rank in range(world_size):
        batches = loader(packed, batch_size, num_workers=workers, rank=rank, world_size=world_size, drop_last=True)
        sizes = []
        for batch in batches:
            sizes.append(len(batch["row_index"]))
            served += batch["row_index"].tolist()
        assert sizes == [batch_size] * (total // world_size // batch_size) == [batch_size] * len(batches)
        assert (batches.epoch, batches.state_dict()["consumed"]) == (1, 0)  # the short tail does not hold it back
    dropped = PackedDataset(packed, rank=0, world_size=world_size, batch_size=batch_size, drop_last=True).dropped_rows
    assert dropped == total - world_size * (total // world_size // batch_size * batch_size)
    assert len(served) == len(set(served)) == total - dropped


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_equals_an_uninterrupted_epoch(packed: Path, workers: int) -> None:
    full = loader(packed, batch_size=30, num_workers=workers, seed=1)
    full.set_epoch(2)
    expected = [batch["row_index"].tolist() for batch in full]
    first = loader(packed, batch_size=30, num_workers=workers, seed=1)
    first.set_epoch(2)
    taken = []
    for k, batch in enumerate(first):
        taken.append(batch["row_index"].tolist())
        if k == 4:
            break
    state = first.state_dict()
    assert state["consumed"] == 150
    resumed = loader(packed, batch_size=30, num_workers=workers, seed=1)
    resumed.load_state_dict(state)
    taken += [batch["row_index"].tolist() for batch in resumed]
    assert taken == expected


def test_set_epoch_reshuffles_the_same_rows(packed: Path) -> None:
    dataset = PackedDataset(packed, seed=3)
    first = [row["row_index"] for row in dataset]
    dataset.set_epoch(1)
    second = [row["row_index"] for row in dataset]
    assert first != second and sorted(first) == sorted(second) == list(range(dataset.num_rows))
    dataset.set_epoch(0)
    assert [row["row_index"] for row in dataset] == first


def test_padded_loader_batches(packed: Path) -> None:
    batch = next(iter(loader(packed, batch_size=2, layout="padded")))
    assert batch["input_ids"].shape == (2, MAX_LEN)
    assert "attention_mask" not in batch  # a 2D mask would turn off a transformers model's document detection
    assert (batch["labels"][batch["document_ids"] == -1] == -100).all()


def test_padded_layout_against_a_plain_loop(packed: Path) -> None:
    dataset = PackedDataset(packed, shuffle=False)
    rows = rows_with_most_documents(dataset, 3)
    width = MAX_LEN + 5
    batch = collate_padded(rows, max_len=width, pad_id=7)
    for k, row in enumerate(rows):
        ids, labels, positions, documents = [], [], [], []
        cu = row["cu_seqlens"].tolist()
        for d, (a, b) in enumerate(zip(cu[:-1], cu[1:])):
            for t in range(a, b):
                ids.append(int(row["input_ids"][t]))
                labels.append(-100 if t == a else int(row["input_ids"][t]))
                positions.append(t - a)
                documents.append(d)
        pad = width - len(ids)
        assert batch["input_ids"][k].tolist() == ids + [7] * pad
        assert batch["labels"][k].tolist() == labels + [-100] * pad
        assert batch["position_ids"][k].tolist() == positions + list(range(pad))  # padding: one more document
        assert batch["document_ids"][k].tolist() == documents + [-1] * pad


def test_additive_mask_is_the_boolean_one_in_scores() -> None:
    documents = torch.tensor([[0, 0, 1, 1, 1, -1], [0, 1, 1, -1, -1, -1]])
    allowed = block_causal_mask(documents)
    additive = block_causal_mask(documents, dtype=torch.bfloat16)
    assert additive.dtype == torch.bfloat16 and additive.shape == allowed.shape == (2, 1, 6, 6)
    assert (additive[allowed] == 0).all()
    assert (additive[~allowed] == torch.finfo(torch.bfloat16).min).all()


def test_the_gpu_test_model_builds_its_tensors_on_the_inputs_device() -> None:
    """The GPU check's model, on the meta device (shapes only, no GPU needed): a tensor left on the CPU fails here
    as it would on CUDA."""
    model = TinyCausalLM().to("meta")
    ids = torch.zeros(1, 8, dtype=torch.int64, device="meta")
    mask = block_causal_mask(torch.zeros(1, 8, dtype=torch.int32, device="meta"))
    assert model(ids, torch.zeros(1, 8, dtype=torch.int64, device="meta"), mask).device.type == "meta"


@pytest.mark.gpu
def test_cuda_batches_match_cpu(packed: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    model = TinyCausalLM().eval()
    batch = next(iter(loader(packed, batch_size=4, device="cuda", shuffle=False)))
    with torch.no_grad():
        on_gpu = model.cuda()(batch["input_ids"], batch["position_ids"], block_causal_mask(batch["document_ids"])).cpu()
        cpu = {k: v.cpu() for k, v in batch.items() if isinstance(v, torch.Tensor)}
        on_cpu = model.cpu()(cpu["input_ids"], cpu["position_ids"], block_causal_mask(cpu["document_ids"]))
    torch.testing.assert_close(on_gpu, on_cpu, atol=1e-4, rtol=1e-4)


@st.composite
def random_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rows as the dataset gives them (numpy int32 columns, a row_index): documents of random lengths, labels
    sometimes (-100 or the token, as the shards hold them)."""
    labelled = draw(st.booleans())
    rows: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 6))):
        lengths = draw(st.lists(st.integers(1, 9), min_size=1, max_size=5))
        total = sum(lengths)
        ids = np.array(draw(st.lists(st.integers(0, 50_000), min_size=total, max_size=total)), dtype=np.int32)
        row: dict[str, Any] = {
            "row_index": index * 3,
            "input_ids": ids,
            "position_ids": np.concatenate([np.arange(n, dtype=np.int32) for n in lengths]),
            "cu_seqlens": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32),
        }
        if labelled:
            keep = np.array(draw(st.lists(st.booleans(), min_size=total, max_size=total)))
            row["labels"] = np.where(keep, ids, -100).astype(np.int32)
        rows.append(row)
    return rows


@given(rows=random_rows(), multiple=st.none() | st.integers(1, 16), spare=st.none() | st.integers(0, 4))
@settings(max_examples=60, deadline=None)
def test_collate_varlen_keeps_each_rows_own_boundaries(
    rows: list[dict[str, Any]], multiple: int | None, spare: int | None
) -> None:
    """Flattening a batch puts every row's documents back to back and nothing else: the batch's boundaries are the
    rows' own (offset by the tokens before each row), positions restart at each, labels are the row's with -100 at
    each document start, and the padding (if asked) is one more document that takes no loss."""
    starts = np.cumsum([0, *(len(row["input_ids"]) for row in rows)])
    own = [int(start + offset) for row, start in zip(rows, starts) for offset in row["cu_seqlens"][1:]]
    total = int(starts[-1])
    padded = total + (-total % multiple if multiple else 0)
    boundaries = [0, *own, *([padded] if padded > total else [])]
    length = None if spare is None else len(boundaries) + spare
    batch = collate_varlen(rows, pad_to_multiple_of=multiple, cu_seqlens_length=length, pad_id=3)
    cu = batch["cu_seqlens"].tolist()
    assert cu == boundaries + [padded] * (spare or 0) and batch["cu_seqlens"].dtype == torch.int32
    ids, positions, labels = (batch[key][0].tolist() for key in ("input_ids", "position_ids", "labels"))
    flat_ids = [int(token) for row in rows for token in row["input_ids"]]
    assert len(ids) == padded and ids[:total] == flat_ids and ids[total:] == [3] * (padded - total)
    flat_labels = [int(v) for row in rows for v in row.get("labels", row["input_ids"])]
    document_ids = batch["document_ids"][0].tolist()
    for document, (a, b) in enumerate(zip(boundaries, boundaries[1:])):
        assert positions[a:b] == list(range(b - a)) and document_ids[a:b] == [document] * (b - a)
        assert labels[a] == -100
        assert labels[a + 1 : b] == (flat_labels[a + 1 : b] if b <= total else [-100] * (b - a - 1))
    assert batch["max_seqlen"] == max(b - a for a, b in zip(boundaries, boundaries[1:]))
    assert batch["row_index"].tolist() == [row["row_index"] for row in rows]


def test_an_output_without_position_ids_gives_the_same_batches(packed: Path, tiny_corpus: Path, tmp_path: Path) -> None:
    """``--no-position-ids``: the loader rebuilds each row's position_ids from its cu_seqlens, so every batch, varlen
    and padded, in the main process and in workers, is the one the stored column gives; a row read by ``datasets``
    (no position_ids at all) collates to the same batch too."""
    from typer.testing import CliRunner

    from packcli.cli import app

    lean = tmp_path / "lean"
    args = ["pack", str(tiny_corpus), "--max-len", str(MAX_LEN), "--shard-size", "500KB", "--no-position-ids"]
    assert CliRunner().invoke(app, [*args, "--out", str(lean), "--quiet"]).exit_code == 0
    for layout, workers in (("varlen", 0), ("varlen", 2), ("padded", 2)):
        full = list(loader(packed, batch_size=16, num_workers=workers, layout=layout, seed=4))
        same = list(loader(lean, batch_size=16, num_workers=workers, layout=layout, seed=4))
        assert len(full) == len(same) > 1
        for expected, got in zip(full, same):
            assert expected.keys() == got.keys()
            for key, value in expected.items():
                assert torch.equal(value, got[key]) if torch.is_tensor(value) else value == got[key], (layout, key)
    rows = PackedDataset(lean)
    assert "position_ids" in rows.row(0)
    datasets = pytest.importorskip("datasets")
    read = datasets.Dataset.from_file(str(next(lean.glob("shard-*.arrow")))).with_format("numpy")
    plain = [{name: rows.row(k)[name] for name in ("input_ids", "position_ids", "cu_seqlens")} for k in range(5)]
    expected, got = collate_varlen(plain), collate_varlen([read[k] for k in range(5)])
    assert all(torch.equal(expected[key], got[key]) for key in ("input_ids", "position_ids", "labels", "cu_seqlens"))


def shown_sources(out: Path, row: int) -> list[dict[str, Any]]:
    """Row ``row``'s document sources as ``packcli show --row N --json`` gives them, without the words."""
    result = CliRunner().invoke(app, ["show", str(out), "--row", str(row), "--json"])
    assert result.exit_code == 0, result.output
    documents = json.loads(result.stdout)["documents"]
    return [{key: document["source"][key] for key in SOURCE_KEYS} for document in documents]


@pytest.mark.parametrize(("layout", "workers"), [("varlen", 0), ("varlen", 2), ("padded", 2)])
def test_sources_list_each_documents_record_as_show_does(packed: Path, layout: str, workers: int) -> None:
    batches = list(loader(packed, batch_size=7, num_workers=workers, layout=layout, sources=True))
    dataset = PackedDataset(packed, shuffle=False, sources=True)
    for batch in batches:
        documents = [len(dataset.row(index)["cu_seqlens"]) - 1 for index in batch["row_index"].tolist()]
        assert len(batch["sources"]) == sum(documents)
        if layout == "varlen":
            assert len(batch["sources"]) == len(batch["cu_seqlens"]) - 1
        assert all(isinstance(source, dict) for source in batch["sources"])
    first = batches[0]
    expected = [source for index in first["row_index"].tolist() for source in shown_sources(packed, index)]
    assert first["sources"] == expected
    served = [source for batch in batches for source in batch["sources"]]
    assert len(served) == len({(s["input"], s["record"], s["piece"]) for s in served})  # each document once


def test_sources_are_off_by_default_and_change_no_state(packed: Path) -> None:
    plain, asked = loader(packed, batch_size=5, seed=2), loader(packed, batch_size=5, seed=2, sources=True)
    first, second = next(iter(plain)), next(iter(asked))
    assert "sources" not in first and "sources" not in next(iter(loader(packed, batch_size=5, layout="padded")))
    assert {key: value for key, value in second.items() if key != "sources"}.keys() == first.keys()
    assert all(torch.equal(first[key], second[key]) for key in first if isinstance(first[key], torch.Tensor))
    assert plain.state_dict() == asked.state_dict()


def test_sources_of_an_output_without_a_source_index_ask_to_repack(packed: Path, tmp_path: Path) -> None:
    out = tmp_path / "old"
    shutil.copytree(packed, out)
    manifest = json.loads((out / "manifest.json").read_text())
    for shard in manifest["shards"]:
        (out / shard["sidecars"].pop("sources")["file"]).unlink()
    (out / "manifest.json").write_text(json.dumps(manifest, sort_keys=True))
    assert "sources" not in next(iter(loader(out, batch_size=2)))  # without sources=True it reads as before
    with pytest.raises(PackcliError, match="keeps no source index") as raised:
        loader(out, batch_size=2, sources=True)
    assert "repack" in raised.value.message and str(raised.value.path) == str(out)


def test_a_spawned_worker_reads_the_sources_itself(packed: Path) -> None:
    """A spawned DataLoader worker gets the dataset without its maps: it opens the shards and source index itself."""
    dataset = PackedDataset(packed, shuffle=False, batch_size=8, sources=True)
    spawned = torch.utils.data.DataLoader(
        dataset, batch_size=8, num_workers=1, collate_fn=collate_varlen, multiprocessing_context="spawn"
    )
    batch = next(iter(spawned))
    assert batch["sources"] == [source for index in range(8) for source in dataset.row(index)["sources"]]
    first_row = shown_sources(packed, 0)
    assert batch["sources"][: len(first_row)] == first_row


def test_a_source_index_short_of_its_shards_documents_is_refused(packed: Path, tmp_path: Path) -> None:
    """A source index that lists fewer documents than its shard holds would name the wrong records: one error."""
    out = tmp_path / "short"
    shutil.copytree(packed, out)
    entry = json.loads((out / "manifest.json").read_text())["shards"][0]
    path = out / entry["sidecars"]["sources"]["file"]
    table = pa.ipc.open_stream(path.read_bytes()).read_all()
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table.slice(0, table.num_rows - 1))
    dataset = PackedDataset(out, shuffle=False, sources=True)  # nothing read yet: only a row asks
    with pytest.raises(PackcliError, match=f"the source index of {entry['file']} lists .* documents, the shard holds"):
        dataset.row(0)


def test_sources_of_an_output_url_come_with_its_local_copy(packed: Path, s3_server: S3Server, tmp_path: Path) -> None:
    """The loader's local copy of an output on object storage brings the source indexes along where asked for."""
    url = put_output(s3_server, packed)
    cache = tmp_path / "cache"
    assert "sources" not in next(iter(loader(url, batch_size=4, cache_dir=cache)))  # a copy without sidecars first
    remote = next(iter(loader(url, batch_size=4, cache_dir=cache, sources=True)))
    local = next(iter(loader(packed, batch_size=4, sources=True)))
    assert remote["sources"] == local["sources"] and remote["row_index"].tolist() == local["row_index"].tolist()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is there: the loader may use it")
def test_a_cuda_device_torch_cannot_reach_is_refused_before_the_output_is_opened(tmp_path: Path) -> None:
    """``device="cuda"`` on a torch without CUDA was taken, and the first batch failed in torch's own assertion
    ("Torch not compiled with CUDA enabled"), mid-loop; now the call refuses it in one line, as its other
    arguments are checked, before the output is read (a path that holds nothing shows it)."""
    with pytest.raises(ValueError, match=r"^device='cuda': torch sees no CUDA device") as refused:
        loader(tmp_path / "nothing", batch_size=2, device="cuda")
    assert "\n" not in str(refused.value)


def test_a_state_that_is_not_a_dict_is_refused_in_one_line(packed: Path) -> None:
    """``load_state_dict(None)`` (a checkpoint without the loader's entry) raised a raw AttributeError."""
    dataset = PackedDataset(packed)
    for state in (None, [], "state"):
        with pytest.raises(PackcliError, match=r"^cannot resume: the state is a \w+, not the dict state_dict"):
            dataset.load_state_dict(state)  # type: ignore[arg-type]
    assert (dataset.epoch, dataset.consumed) == (0, 0)
    taken = PackedDataset(packed)
    next(iter(taken))
    for mapping in (types.MappingProxyType(taken.state_dict()), collections.UserDict(taken.state_dict())):
        resumed = PackedDataset(packed)
        resumed.load_state_dict(mapping)  # type: ignore[arg-type]  # a mapping that is no dict resumes as one does
        assert resumed.consumed == taken.consumed
