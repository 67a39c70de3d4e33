"""``packcli export``: each format read back by its trainer's own reader (megatron-core, OLMo-core, datatrove) or,
for Bridge and MDS, by a re-derivation of what their collate functions build, compared with packcli.torch's batch.
Every test checks conservation: the exported documents are the packed output's documents token for token (split
documents whole again where the format finds documents), and the supervised positions are the same.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3_server import S3Server, put_output
from tokenizers import Tokenizer
from typer.testing import CliRunner

from packcli.cli import app
from packcli.format.columns import IGNORE_INDEX
from packcli.report.verify import verify_output
from tests.conftest import (
    SAMPLE,
    as_packed_before_split_pieces,
    documented_names,
    error_line,
    json_keys,
    listed_split_pieces,
    read_jsonl,
    rewrite_split_pieces,
    run_writing_no_file_over,
    shared_path,
    write_jsonl,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning"),
    # under make test (-n 2 --dist loadgroup) the module keeps to one worker: its packed outputs (module fixtures,
    # nine packs) are built once, not once on each worker
    pytest.mark.xdist_group("export"),
]

RUNNER = CliRunner()


def run(*args: str | Path) -> Any:
    result = RUNNER.invoke(app, [str(arg) for arg in args])
    assert result.exit_code == 0, result.output
    return result


def export(packed: Path, fmt: str, out: Path, *extra: str) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(run("export", packed, "--to", fmt, "--out", out, "--json", *extra).stdout)
    return summary


# -- the packed outputs, and what their documents are ---------------------------------------------------------------


def first_records(path: Path, count: int) -> list[dict[str, Any]]:
    """The first records of a large JSON Lines file, without reading the rest."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line, _ in zip(handle, range(count))]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Small slices of the real corpora: long code files (split by --overflow split) and prompt/response pairs."""
    root = tmp_path_factory.mktemp("corpora")
    code = first_records(shared_path("data/cpython_stdlib.jsonl"), 24)
    sft = first_records(shared_path("data/bigbench_sft.jsonl"), 40)
    return {
        "code": write_jsonl(root / "code.jsonl", [{"text": record["text"]} for record in code]),
        "sft": write_jsonl(root / "sft.jsonl", [{"prompt": r["prompt"], "response": r["response"]} for r in sft]),
        "tokenizer": shared_path("tokenizers/gpt2/tokenizer.json"),
    }


@pytest.fixture(scope="module")
def text_packed(corpora: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("text") / "packed"
    run("pack", corpora["code"], "--tokenizer", corpora["tokenizer"], "--max-len", "256", "--out", out, "--quiet")
    return out


@pytest.fixture(scope="module")
def sft_packed(corpora: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sft") / "packed"
    run(
        "pack", corpora["sft"], "--tokenizer", corpora["tokenizer"], "--prompt-field", "prompt",
        "--response-field", "response", "--max-len", "256", "--overflow", "split", "--out", out, "--quiet",
    )  # fmt: skip
    return out


def stored_pieces(packed: Path) -> list[dict[str, Any]]:
    """Every stored document (piece) in output order: tokens, labels (or None), and its split group and place."""
    manifest = json.loads((packed / "manifest.json").read_text())
    pieces = []
    for shard in manifest["shards"]:
        where = {(row, index): (shard["file"].rsplit("shard-", 1)[0], doc, piece) for row, index, doc, piece in listed_split_pieces(packed, shard)}  # fmt: skip
        table = pa.ipc.open_stream(pa.memory_map(str(packed / shard["file"]))).read_all().to_pylist()
        for row_number, row in enumerate(table):
            cu = row["cu_seqlens"]
            for index in range(len(cu) - 1):
                labels = row.get("labels")
                pieces.append(
                    {
                        "tokens": row["input_ids"][cu[index] : cu[index + 1]],
                        "labels": None if labels is None else labels[cu[index] : cu[index + 1]],
                        "group": where.get((row_number, index)),
                    }
                )
    return pieces


def expected_documents(packed: Path) -> list[dict[str, Any]]:
    """The documents an EOS- or index-finding format must hold, in order: each split document whole, where its
    first stored piece stands; tokens, supervision mask, and its pieces' lengths."""
    pieces = stored_pieces(packed)
    groups: dict[Any, list[tuple[int, dict[str, Any]]]] = {}
    for piece in pieces:
        if piece["group"] is not None:
            partition, doc, place = piece["group"]
            groups.setdefault((partition, doc), []).append((place, piece))
    documents, seen = [], set()
    for piece in pieces:
        members = [piece]
        if piece["group"] is not None:
            key = piece["group"][:2]
            if key in seen:
                continue
            seen.add(key)
            members = [member for _, member in sorted(groups[key], key=lambda pair: pair[0])]
        tokens = [token for member in members for token in member["tokens"]]
        mask = None
        if piece["labels"] is not None:
            mask = [label != IGNORE_INDEX for member in members for label in member["labels"]]
        documents.append({"tokens": tokens, "mask": mask, "pieces": [len(m["tokens"]) for m in members]})
    return documents


def unsplit_supervision(corpus: Path, tokenizer: Path) -> dict[tuple[int, ...], list[bool]]:
    """Each prompt/response record as pack encodes it, whole: its tokens (prompt, response, EOS) -> its supervision
    (none over the prompt nor at the first token; the response and its EOS). What a split document joined must get."""
    encoder = Tokenizer.from_file(str(tokenizer))
    eos = encoder.token_to_id("<|endoftext|>")
    documents = {}
    for record in read_jsonl(corpus):
        prompt, response = encoder.encode(record["prompt"]).ids, encoder.encode(record["response"]).ids
        mask = [False] * len(prompt) + [True] * (len(response) + 1)
        documents[(*prompt, *response, eos)] = [False, *mask[1:]]
    return documents


def joined_documents(packed: Path, corpus: Path, tokenizer: Path) -> list[dict[str, Any]]:
    """``expected_documents`` of a prompt/response output, each with the supervision an export must write:
    ``whole``, its record's encoded whole (``unsplit_supervision``); ``mask``, what the neighbour rule gives an output
    packed before ``first_supervised``: the whole's, except at a join whose neighbours in the whole document differ (a
    span starts or ends at the cut), left unsupervised there, as stored. ``unsure``: how many such joins it has."""
    whole = unsplit_supervision(corpus, tokenizer)
    documents = expected_documents(packed)
    for document in documents:
        mask, document["unsure"] = list(whole[tuple(document["tokens"])]), 0
        for cut in np.cumsum(document["pieces"])[:-1].tolist():
            after = mask[cut + 1] if cut + 1 < len(mask) else mask[cut - 1]
            if mask[cut - 1] != after:
                mask[cut], document["unsure"] = False, document["unsure"] + 1
        document["whole"], document["mask"] = whole[tuple(document["tokens"])], mask
    return documents


def encoded_corpus(corpus: Path, tokenizer: Path) -> list[list[int]]:
    """The corpus as the tokenizer encodes it, each document with its EOS: what the export must conserve."""
    encoder = Tokenizer.from_file(str(tokenizer))
    eos = encoder.token_to_id("<|endoftext|>")
    return [[*encoder.encode(record["text"]).ids, eos] for record in read_jsonl(corpus)]


def split_by(values: np.ndarray, lengths: list[int] | np.ndarray) -> list[list[int]]:
    ends = np.cumsum(lengths)
    return [values[end - length : end].tolist() for end, length in zip(ends, lengths)]


# -- megatron ---------------------------------------------------------------------------------------------------------


def megatron_dataset(prefix: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDataset

        return IndexedDataset(str(prefix))


def test_megatron_indexed_dataset_holds_the_corpus_documents_whole(
    text_packed: Path, corpora: dict[str, Any], tmp_path: Path
) -> None:
    summary = export(text_packed, "megatron", tmp_path / "mg")
    dataset = megatron_dataset(tmp_path / "mg" / "tokens")
    assert dataset.index.dtype == np.uint16  # GPT-2's 50257 ids fit Megatron's uint16 rule (< 65500)
    documents = [dataset[i].tolist() for i in range(len(dataset))]  # one sequence per document
    assert dataset.document_indices.tolist() == list(range(len(documents) + 1))
    expected = expected_documents(text_packed)
    assert documents == [document["tokens"] for document in expected]  # output order, split ones whole
    manifest = json.loads((text_packed / "manifest.json").read_text())
    assert manifest["totals"]["split_documents"] > 0  # the slice does exercise split documents
    assert sorted(documents) == sorted(encoded_corpus(corpora["code"], corpora["tokenizer"]))  # conservation
    assert summary["totals"]["documents"] == len(documents) == manifest["totals"]["input_documents"]
    assert summary["totals"]["tokens"] == manifest["totals"]["tokens"]
    assert summary["source"]["fingerprint"] == manifest["fingerprint"]


def test_megatron_gpt_dataset_builds_on_the_export(text_packed: Path, tmp_path: Path) -> None:
    """Megatron's GPTDataset, built on CPU over the export: each sample, cut at its EODs, is made of stretches of
    exported documents (whole ones between two EODs), and its labels are its tokens shifted by one."""
    export(text_packed, "megatron", tmp_path / "mg")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
        from megatron.core.datasets.utils import Split

        dataset = megatron_dataset(tmp_path / "mg" / "tokens")

        class Tokenizer:
            eod = 50256
            pad = 50256
            vocab_size = 50257
            unique_identifiers: ClassVar[dict[str, Any]] = {"class": "gpt2"}

        config = GPTDatasetConfig(
            random_seed=1,
            sequence_length=512,
            blend=None,
            split="1,0,0",
            tokenizer=Tokenizer(),
            reset_position_ids=True,
            reset_attention_mask=False,
            eod_mask_loss=False,
            path_to_cache=str(tmp_path / "cache"),
            mid_level_dataset_surplus=0.005,
            create_attention_mask=False,
        )
        documents = np.arange(len(dataset.document_indices) - 1, dtype=np.int32)
        gpt = GPTDataset(dataset, str(tmp_path / "mg" / "tokens"), documents, 16, Split.train, config)
        samples = [gpt[index] for index in range(len(gpt))]
    exported = [np.array(document["tokens"], dtype=">u4").tobytes() for document in expected_documents(text_packed)]
    assert len(samples) >= 16  # at least what was asked: whole epochs
    for sample in samples:
        tokens = np.append(sample["tokens"].numpy(), sample["labels"].numpy()[-1])
        assert (sample["labels"][:-1] == sample["tokens"][1:]).all()
        cuts = [0, *(np.nonzero(tokens == 50256)[0] + 1).tolist(), len(tokens)]
        for start, end in zip(cuts[:-1], cuts[1:]):
            stretch = tokens[start:end].astype(">u4").tobytes()
            assert any(stretch in document and document.index(stretch) % 4 == 0 for document in exported)


def test_megatron_export_of_a_partitioned_output(corpora: dict[str, Any], tmp_path: Path) -> None:
    packed = tmp_path / "parts"
    run("pack", corpora["code"], "--tokenizer", corpora["tokenizer"], "--max-len", "256", "--partitions", "2",
        "--workers", "1", "--out", packed, "--quiet")  # fmt: skip
    export(packed, "megatron", tmp_path / "mg")
    dataset = megatron_dataset(tmp_path / "mg" / "tokens")
    documents = [dataset[i].tolist() for i in range(len(dataset))]
    assert documents == [document["tokens"] for document in expected_documents(packed)]
    assert sorted(documents) == sorted(encoded_corpus(corpora["code"], corpora["tokenizer"]))


def test_megatron_refuses_a_fine_tuning_output(sft_packed: Path, tmp_path: Path) -> None:
    result = RUNNER.invoke(app, ["export", str(sft_packed), "--to", "megatron", "--out", str(tmp_path / "mg")])
    assert result.exit_code == 2
    assert "no place for labels" in result.output and "--to bridge" in result.output
    assert not (tmp_path / "mg").exists()


# -- olmo-core --------------------------------------------------------------------------------------------------------


def test_olmo_core_fsl_dataset_reads_the_tokens_and_label_mask(
    corpora: dict[str, Any], sft_packed: Path, tmp_path: Path
) -> None:
    summary = export(sft_packed, "olmo-core", tmp_path / "olmo")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from olmo_core.data.numpy_dataset import NumpyFSLDataset, NumpyPackedFSLDataset

        files = [str(tmp_path / "olmo" / "tokens.npy")]
        masks = [str(tmp_path / "olmo" / "label_mask.npy")]
        common = {"pad_token_id": 50256, "eos_token_id": 50256, "vocab_size": 50257, "dtype": np.uint16}
        fsl = NumpyFSLDataset(*files, sequence_length=64, label_mask_paths=masks, **common)
        fsl.work_dir = tmp_path / "work"
        fsl.prepare()
        items = [fsl[i] for i in range(len(fsl))]
    tokens = np.concatenate([item["input_ids"].numpy() for item in items])
    mask = np.concatenate([item["label_mask"].numpy() for item in items])
    expected = joined_documents(sft_packed, corpora["sft"], corpora["tokenizer"])
    all_tokens = np.array([t for document in expected for t in document["tokens"]])
    all_mask = np.array([m for document in expected for m in document["whole"]])  # each record's, encoded whole
    assert len(tokens) == len(all_tokens) // 64 * 64  # OLMo-core drops the last partial window
    assert (tokens == all_tokens[: len(tokens)]).all() and (mask == all_mask[: len(mask)]).all()
    assert summary["totals"]["supervised_tokens"] == int(all_mask.sum())
    manifest = json.loads((sft_packed / "manifest.json").read_text())
    # every document ends in EOS, where OLMo-core's packed dataset finds it
    ends = np.cumsum([len(document["tokens"]) for document in expected]) - 1
    assert (all_tokens[ends] == 50256).all() and manifest["totals"]["split_documents"] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        packed = NumpyPackedFSLDataset(*files, sequence_length=2048, label_mask_paths=masks, **common)
        packed.work_dir = tmp_path / "work-packed"
        packed.prepare()
        instances = [packed[i] for i in range(len(packed))]
    by_tokens = {tuple(document["tokens"]): document["whole"] for document in expected}
    found = 0
    for instance in instances:
        ids, label_mask = instance["input_ids"].numpy(), instance["label_mask"].numpy()
        eos_at = np.nonzero(ids == 50256)[0]
        start = 0
        for end in eos_at:
            document = tuple(ids[start : end + 1].tolist())
            if document in by_tokens:  # a whole document (not padding): its mask is packcli's
                assert label_mask[start : end + 1].tolist() == by_tokens[document]
                found += 1
            start = end + 1
    assert found == len(expected)  # OLMo-core found every document by its EOS, with packcli's supervision


def exported_documents(out: Path, fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An olmo-core or nanotron export's tokens, supervision mask, and each document's length as its trainer finds
    them (OLMo-core by EOS, nanotron by its index)."""
    if fmt == "olmo-core":
        tokens = np.fromfile(out / "tokens.npy", dtype=np.uint16)
        mask = np.fromfile(out / "label_mask.npy", dtype=np.bool_)
        ends = np.nonzero(tokens == 50256)[0] + 1
    else:
        tokens = np.fromfile(out / "packcli.ds", dtype=np.uint16)
        mask = np.fromfile(out / "packcli.ds.loss", dtype=np.bool_)
        ends = np.fromfile(out / "packcli.ds.index", dtype=np.uint64).astype(np.int64)
    assert ends[-1] == len(tokens)
    return tokens, mask, np.diff(ends, prepend=0)


def without_first_supervised(source: Path, copy: Path) -> Path:
    """A copy of ``source`` whose split_pieces sidecars lack the ``first_supervised`` column (as pack wrote them
    before it existed), their sizes and checksums fixed in the manifest."""
    shutil.copytree(source, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    for shard in manifest["shards"]:
        if "sidecars" in shard and "split_pieces" in shard["sidecars"]:
            rewrite_split_pieces(copy, shard, listed_split_pieces(copy, shard), sidecar_digests(copy, shard))
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


@pytest.mark.parametrize("fmt", ["olmo-core", "nanotron"])
def test_a_split_document_joined_is_supervised_as_the_whole_document(
    corpora: dict[str, Any], sft_packed: Path, tmp_path: Path, fmt: str
) -> None:
    """A document the export holds has exactly the supervision its record has encoded whole: the token at each
    join of a split document's pieces (-100 in the shards, each piece a document there) takes the supervision pack
    recorded for it (the sidecar's ``first_supervised``): none lost, none guessed, no warning (the red team's case
    lost 32 of 4,631 supervised tokens; the neighbour rule still lost one here, and warned of 2 joins)."""
    result = RUNNER.invoke(app, ["export", str(sft_packed), "--to", fmt, "--out", str(tmp_path / fmt), "--json"])
    assert result.exit_code == 0, result.output
    tokens, mask, lengths = exported_documents(tmp_path / fmt, fmt)
    expected = joined_documents(sft_packed, corpora["sft"], corpora["tokenizer"])
    assert split_by(tokens, lengths) == [document["tokens"] for document in expected]
    assert split_by(mask, lengths) == [document["whole"] for document in expected]  # each record encoded whole
    joins = sum(len(document["pieces"]) - 1 for document in expected)
    assert joins == 48 and "join(s) of split documents' pieces" not in result.stderr
    stored = json.loads((sft_packed / "manifest.json").read_text())["totals"]["supervised_tokens"]
    assert json.loads(result.stdout)["totals"]["supervised_tokens"] == int(mask.sum()) > stored


def test_an_output_packed_before_first_supervised_joins_by_the_neighbour_rule_and_says_so(
    corpora: dict[str, Any], sft_packed: Path, tmp_path: Path
) -> None:
    """Sidecars without ``first_supervised`` (packed before it): each join's token takes the supervision its
    neighbours in the whole document agree on; where they differ (the cut falls where the response starts), it stays
    as stored, and the export says how many such joins it met."""
    packed = without_first_supervised(sft_packed, tmp_path / "old")
    result = RUNNER.invoke(app, ["export", str(packed), "--to", "olmo-core", "--out", str(tmp_path / "olmo")])
    assert result.exit_code == 0, result.output
    tokens, mask, lengths = exported_documents(tmp_path / "olmo", "olmo-core")
    expected = joined_documents(packed, corpora["sft"], corpora["tokenizer"])
    assert split_by(tokens, lengths) == [document["tokens"] for document in expected]
    assert split_by(mask, lengths) == [document["mask"] for document in expected]
    unsure = sum(document["unsure"] for document in expected)
    assert unsure == 2 and f"warning: {unsure} join(s) of split documents' pieces start with a token" in result.stderr
    lost = sum(whole != said for document in expected for whole, said in zip(document["whole"], document["mask"]))
    assert lost == 1


def test_labels_given_with_the_ids_are_joined_exactly(tmp_path: Path) -> None:
    """Labels given with --labels-field may hold spans of one token, which neighbours do not tell: pack records each
    join's supervision, so the export has the labels as given; an output packed before that leaves each join's token
    as stored (unsupervised) and counts them."""
    corpus = write_jsonl(
        tmp_path / "ids.jsonl", [{"ids": list(range(1, 11)), "labels": [-100] * 3 + list(range(4, 11))}]
    )
    args = ["--ids-field", "ids", "--labels-field", "labels", "--eos-id", "0", "--max-len", "4", "--overflow", "split"]
    run("pack", corpus, *args, "--out", tmp_path / "packed", "--quiet")
    said = run("export", tmp_path / "packed", "--to", "olmo-core", "--out", tmp_path / "olmo").stderr
    assert "join(s) of split documents' pieces" not in said
    mask = np.fromfile(tmp_path / "olmo" / "label_mask.npy", dtype=np.bool_)
    assert mask.astype(int).tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]  # the labels as given
    old = without_first_supervised(tmp_path / "packed", tmp_path / "old")
    said = run("export", old, "--to", "olmo-core", "--out", tmp_path / "olmo-old").stderr
    assert "warning: 2 join(s) of split documents' pieces start with a token" in said
    mask = np.fromfile(tmp_path / "olmo-old" / "label_mask.npy", dtype=np.bool_)
    assert mask.astype(int).tolist() == [0, 0, 0, 1, 0, 1, 1, 1, 0, 1, 1]  # the joins at 4 and 8 as stored


def tokenizer_with_vocabulary(size: int, directory: Path) -> Path:
    """GPT-2's tokenizer with exactly ``size`` ids (a boundary of the readers' dtype rules), EOS the highest. Grown
    (``size`` > 50257): unused entries fill the ids above 50255, and " the", the text's commonest token, takes the
    id below EOS, so the packed ids reach ``size - 1``. Shrunk to 256: the first 255 byte tokens and no merges
    (ASCII text encodes byte by byte)."""
    config = json.loads(shared_path("tokenizers/gpt2/tokenizer.json").read_text(encoding="utf-8"))
    vocabulary = config["model"]["vocab"]
    del vocabulary["<|endoftext|>"]
    if size < len(vocabulary):
        config["model"]["vocab"] = vocabulary = {text: id for text, id in vocabulary.items() if id < size - 1}
        config["model"]["merges"] = []
    else:
        vocabulary.update({f"<unused_{number}>": number for number in range(50256, size - 2)})
        vocabulary[f"<unused_{vocabulary['Ġthe']}>"] = vocabulary["Ġthe"]
        vocabulary["Ġthe"] = size - 2
    vocabulary["<|endoftext|>"] = size - 1
    for token in config["added_tokens"]:
        token["id"] = size - 1
    directory.mkdir()
    (directory / "tokenizer.json").write_text(json.dumps(config), encoding="utf-8")
    assert Tokenizer.from_file(str(directory / "tokenizer.json")).get_vocab_size() == size
    return directory


@pytest.fixture(scope="module")
def vocabulary_boundaries(corpora: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """ASCII text (four code files) packed with tokenizers of 256, 65,535, 65,536 and 65,537 ids, the boundaries of
    the readers' dtype rules: size -> the packed output (its tokenizer beside it, ``tokenizer-SIZE``)."""
    root = tmp_path_factory.mktemp("vocabularies")
    text = [{"text": r["text"].encode("ascii", "ignore").decode()} for r in read_jsonl(corpora["code"])[:4]]
    corpus = write_jsonl(root / "ascii.jsonl", text)
    packed = {}
    for size in (256, 65_535, 65_536, 65_537):
        tokenizer = tokenizer_with_vocabulary(size, root / f"tokenizer-{size}")
        packed[size] = root / f"packed-{size}"
        run("pack", corpus, "--tokenizer", tokenizer, "--max-len", "256", "--out", packed[size], "--quiet")
    return packed


def test_olmo_core_token_dtype_is_the_one_olmo_core_assumes_for_the_vocabulary(
    vocabulary_boundaries: dict[int, Path], tmp_path: Path
) -> None:
    """Vocabularies of 256, 65,536 and 65,537 ids (EOS the highest id, in the tokens): tokens.npy has the dtype
    OLMo-core's dataset config assumes for that vocabulary when none is given (``get_dtype``: the smallest unsigned
    type holding vocab_size - 1), so NumpyFSLDataset reads back every token in order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from olmo_core.data.numpy_dataset import NumpyFSLDataset, NumpyFSLDatasetConfig
        from olmo_core.data.tokenizer import TokenizerConfig
    for size in (256, 65_536, 65_537):
        packed = vocabulary_boundaries[size]
        export(packed, "olmo-core", tmp_path / f"olmo-{size}")
        special = {"eos_token_id": size - 1, "pad_token_id": size - 1}
        tokens = [t for document in expected_documents(packed) for t in document["tokens"]]
        assert tokens[-1] == size - 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            path = str(tmp_path / f"olmo-{size}" / "tokens.npy")
            config = NumpyFSLDatasetConfig(
                paths=[path], sequence_length=8, tokenizer=TokenizerConfig(vocab_size=size, **special)
            )
            dataset = NumpyFSLDataset(
                path, sequence_length=len(tokens), vocab_size=size, dtype=config.get_dtype(), **special
            )
            dataset.work_dir = tmp_path / f"work-{size}"
            dataset.prepare()
            assert dataset[0]["input_ids"].tolist() == tokens, size


# -- nanotron (datatrove) ---------------------------------------------------------------------------------------------


def test_datatrove_folder_dataset_reads_tokens_and_document_positions(
    corpora: dict[str, Any], text_packed: Path, sft_packed: Path, tmp_path: Path
) -> None:
    export(text_packed, "nanotron", tmp_path / "nt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from datatrove.utils.dataset import DatatroveFolderDataset

        dataset = DatatroveFolderDataset(str(tmp_path / "nt"), seq_len=63, token_size=2, return_positions=True)
        items = [dataset[i] for i in range(len(dataset))]
    expected = expected_documents(text_packed)
    all_tokens = np.array([t for document in expected for t in document["tokens"]])
    positions = np.concatenate([np.arange(len(document["tokens"])) for document in expected])
    for number, item in enumerate(items):
        window = slice(number * 64, number * 64 + 64)
        assert item["input_ids"].tolist() == all_tokens[window].tolist()
        # datatrove restarts positions where the index says a document ends: at packcli's documents, split ones whole
        restart = positions[window].copy()
        restart -= restart[0] if restart[0] else 0
        starts = np.nonzero(positions[window] == 0)[0]
        expected_positions = np.arange(64) - np.maximum.accumulate(
            np.where(np.isin(np.arange(64), starts), np.arange(64), 0)
        )
        assert item["positions"].tolist() == expected_positions.tolist()
    metadata = (tmp_path / "nt" / "packcli.ds.metadata").read_text().split("\n")
    import humanize

    assert metadata[1:] == [str(len(all_tokens)), humanize.metric(len(all_tokens), unit="T")]
    export(sft_packed, "nanotron", tmp_path / "nt-sft")
    loss = np.fromfile(tmp_path / "nt-sft" / "packcli.ds.loss", dtype=np.bool_)
    sft_expected = joined_documents(sft_packed, corpora["sft"], corpora["tokenizer"])
    assert loss.tolist() == [m for document in sft_expected for m in document["whole"]]
    index = np.fromfile(tmp_path / "nt-sft" / "packcli.ds.index", dtype=np.uint64)
    assert index.tolist() == np.cumsum([len(document["tokens"]) for document in sft_expected]).tolist()


def test_nanotron_token_size_is_datatrove_s_at_the_uint16_boundary(
    vocabulary_boundaries: dict[int, Path], tmp_path: Path
) -> None:
    """Vocabularies of 65,535, 65,536 and 65,537 ids, the top id in the tokens: the .ds token size is the one
    datatrove's tokenizer and nanotron's Nanoset take for that vocabulary (2 bytes up to 65,536 ids), so
    DatatroveFolderDataset, given that size, reads back every token in order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from datatrove.pipeline.tokens.tokenizer import DocumentTokenizer
        from datatrove.utils.dataset import DatatroveFolderDataset
    for size in (65_535, 65_536, 65_537):
        packed = vocabulary_boundaries[size]
        out = tmp_path / f"nt-{size}"
        export(packed, "nanotron", out)
        tokenizer = packed.parent / f"tokenizer-{size}" / "tokenizer.json"
        token_size = DocumentTokenizer(str(tmp_path / "dt"), str(tokenizer)).token_size
        assert (out / "packcli.ds.metadata").read_text().splitlines()[0].endswith(f"tokenizer-{size}|{token_size}")
        tokens = [t for document in expected_documents(packed) for t in document["tokens"]]
        assert max(tokens) == size - 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dataset = DatatroveFolderDataset(str(out), seq_len=len(tokens) - 1, token_size=token_size)
            assert dataset[0]["input_ids"].tolist() == tokens, size


def test_document_formats_count_the_sequences_their_files_hold(text_packed: Path, tmp_path: Path) -> None:
    """megatron, olmo-core and nanotron store a split document whole: each counts one sequence per document it
    wrote (the index entries, Megatron's sequences), never the pieces the packed output cut it into."""
    manifest = json.loads((text_packed / "manifest.json").read_text())
    assert manifest["totals"]["split_documents"] > 0
    documents = len(expected_documents(text_packed))
    for fmt in ("megatron", "olmo-core", "nanotron"):
        totals = export(text_packed, fmt, tmp_path / fmt)["totals"]
        assert totals["sequences"] == totals["documents"] == documents, fmt
    assert len(np.fromfile(tmp_path / "nanotron" / "packcli.ds.index", dtype=np.uint64)) == documents


def test_nanotron_metadata_keeps_its_three_lines_whatever_the_tokenizer_is_called(
    small_packed: Path, tmp_path: Path
) -> None:
    """A tokenizer directory named with a line break and a bar: the metadata's first line still holds the whole
    name and the token size (``NAME|2``, one bar), then the token count, as datatrove's merger reads it."""
    from packcli.encode.tokenizer import load_tokenizer

    tokenizer = tmp_path / "my|odd\ntokenizer"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text(load_tokenizer().tokenizer.to_str())
    corpus = next(small_packed.parent.glob("*.jsonl"))
    run("pack", corpus, "--tokenizer", tokenizer, "--max-len", "128", "--out", tmp_path / "packed", "--quiet")
    summary = export(tmp_path / "packed", "nanotron", tmp_path / "nt")
    lines = (tmp_path / "nt" / "packcli.ds.metadata").read_text().split("\n")
    assert len(lines) == 3 and lines[0].count("|") == 1 and lines[0].endswith("my/odd tokenizer|2"), lines
    assert lines[1] == str(summary["totals"]["tokens"])


def test_short_count_is_datatrove_s_metric() -> None:
    import humanize

    from packcli.export.nanotron import short_count

    for value in [0, 1, 9, 999, 1000, 1234, 9995, 99_950, 999_500, 999_499, 1_000_000, 123_456_789, 10**15 + 7]:
        assert short_count(value, "T") == humanize.metric(value, unit="T"), value


# -- bridge: what its collate function builds, against packcli.torch's batch -----------------------------------------


def bridge_collate(row: dict[str, Any], eos: int) -> dict[str, np.ndarray]:
    """What Megatron-Bridge's GPTSFTPackedDataset.collate_fn derives from one Parquet row (answer_only_loss)."""
    ids, bounds = np.array(row["input_ids"]), [*row["seq_start_id"], len(row["input_ids"])]
    spans = list(zip(bounds[:-1], bounds[1:]))
    tokens = np.concatenate([ids[s : e - 1] for s, e in spans])
    loss = np.concatenate([np.array(row["loss_mask"])[s : e - 1] for s, e in spans]).astype(np.int64)
    loss[tokens == eos] = 0
    return {
        "tokens": tokens,
        "labels": np.concatenate([ids[s + 1 : e] for s, e in spans]),
        "loss_mask": loss,
        "position_ids": np.concatenate([np.arange(e - s - 1) for s, e in spans]),
        "cu_seqlens": np.concatenate(([0], np.cumsum([e - s - 1 for s, e in spans]))),
    }


@pytest.mark.parametrize("multiple", [1, 8])
def test_bridge_rows_train_what_packcli_torch_trains(sft_packed: Path, tmp_path: Path, multiple: int) -> None:
    from packcli.torch import PackedDataset, collate_varlen

    extra = ["--pad-to-multiple", str(multiple)] if multiple > 1 else []
    summary = export(sft_packed, "bridge", tmp_path / "br", *extra)
    files = sorted((tmp_path / "br").glob("training_*.idx.parquet"))
    assert len(files) == 1
    rows = pq.read_table(files[0]).to_pylist()
    metadata = json.loads(next((tmp_path / "br").glob("*_metadata.jsonl")).read_text())
    assert files[0].name == f"training_{metadata[0]['pack_size']}.idx.parquet"
    dataset = PackedDataset(sft_packed, shuffle=False)
    assert len(rows) == dataset.num_rows
    supervised = 0
    for index, row in enumerate(rows):
        bridge = bridge_collate(row, 50256)
        batch = collate_varlen([dataset.row(index)])
        ids, labels = batch["input_ids"][0].numpy(), batch["labels"][0].numpy()
        cu = batch["cu_seqlens"].numpy()
        pairs = set()  # (input position in its document, input token, target token) where loss is taken
        for start, end in zip(cu[:-1], cu[1:]):
            for t in range(start + 1, end):
                if labels[t] != IGNORE_INDEX:
                    pairs.add((t - 1 - start, int(ids[t - 1]), int(ids[t])))
        bridge_pairs = set()
        for start, end in zip(bridge["cu_seqlens"][:-1], bridge["cu_seqlens"][1:]):
            for p in range(start, end):
                if bridge["loss_mask"][p]:
                    bridge_pairs.add((p - start, int(bridge["tokens"][p]), int(bridge["labels"][p])))
        assert bridge_pairs == pairs
        supervised += len(pairs)
        if multiple == 1:
            assert bridge["tokens"].tolist() == [int(ids[t]) for s, e in zip(cu[:-1], cu[1:]) for t in range(s, e - 1)]
            assert (np.diff(bridge["cu_seqlens"]) == np.diff(cu) - 1).all()
            assert bridge["position_ids"].tolist() == [p for s, e in zip(cu[:-1], cu[1:]) for p in range(e - s - 1)]
        else:
            assert all(b % multiple == 0 for b in row["seq_start_id"]) and len(row["input_ids"]) % multiple == 0
    manifest = json.loads((sft_packed / "manifest.json").read_text())
    assert supervised == summary["totals"]["supervised_tokens"] == manifest["totals"]["supervised_tokens"]
    lengths = [len(row["input_ids"]) for row in rows]
    assert metadata[0]["min_packed_seqlen"] == min(lengths)
    assert metadata[0]["max_samples_per_bin"] == max(len(row["seq_start_id"]) for row in rows)
    assert metadata[0]["pack_size"] >= max(lengths)


# -- mds: the byte layout decoded as streaming's reader does, against packcli.torch's rows ----------------------------


def decode_mds(directory: Path) -> list[np.ndarray]:
    """Samples of an MDS dataset with one ``ndarray:uint32`` column, decoded per streaming's MDS reader."""
    index = json.loads((directory / "index.json").read_text())
    assert index["version"] == 2
    samples = []
    for shard in index["shards"]:
        assert shard["column_encodings"] == ["ndarray:uint32"] and shard["column_names"] == ["tokens"]
        data = (directory / shard["raw_data"]["basename"]).read_bytes()
        assert len(data) == shard["raw_data"]["bytes"] < 1 << 26
        count = int(np.frombuffer(data, np.uint32, 1)[0])
        assert count == shard["samples"]
        offsets = np.frombuffer(data, np.uint32, count + 1, 4)
        config = {key: shard[key] for key in ("column_encodings", "column_names", "column_sizes", "compression", "format", "hashes", "size_limit", "version")}  # fmt: skip
        assert data[4 + 4 * (count + 1) : offsets[0]] == json.dumps(config, sort_keys=True).encode()
        for start, end in zip(offsets[:-1], offsets[1:]):
            sample = data[start:end]
            size = int(np.frombuffer(sample, np.uint32, 1)[0])
            assert size == len(sample) - 4
            head = sample[4]
            ndim, shape_code = head >> 2, head & 3
            shape_dtype = np.dtype(["uint8", "uint16", "uint32", "uint64"][shape_code])
            assert ndim == 1
            length = int(np.frombuffer(sample, shape_dtype, 1, 5)[0])
            samples.append(np.frombuffer(sample, np.uint32, length, 5 + shape_dtype.itemsize))
    return samples


def test_mds_samples_are_the_packed_rows(text_packed: Path, tmp_path: Path) -> None:
    from packcli.torch import PackedDataset

    summary = export(text_packed, "mds", tmp_path / "mds")
    samples = decode_mds(tmp_path / "mds")
    dataset = PackedDataset(text_packed, shuffle=False)
    assert len(samples) == dataset.num_rows == summary["totals"]["sequences"]
    for index, sample in enumerate(samples):
        assert sample.tolist() == dataset.row(index)["input_ids"].tolist()
    assert sum(len(sample) for sample in samples) == summary["totals"]["tokens"]


def test_mds_shards_close_as_mdswriter_closes_them(
    text_packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards planned ahead from the rows' offsets: with a small size limit, many shards, each closed just before a
    sample would take it past the limit (each sample counted with 4 more bytes, as MDSWriter counts)."""
    from packcli.export import mds
    from packcli.torch import PackedDataset

    limit = 40_000
    monkeypatch.setattr(mds, "SIZE_LIMIT", limit)
    export(text_packed, "mds", tmp_path / "mds")
    dataset = PackedDataset(text_packed, shuffle=False)
    assert [sample.tolist() for sample in decode_mds(tmp_path / "mds")] == [
        dataset.row(index)["input_ids"].tolist() for index in range(dataset.num_rows)
    ]
    index = json.loads((tmp_path / "mds" / "index.json").read_text())
    counted = []  # per shard: its bytes as MDSWriter counts them, and its first sample's
    for shard in index["shards"]:
        data = (tmp_path / "mds" / shard["raw_data"]["basename"]).read_bytes()
        offsets = np.frombuffer(data, np.uint32, shard["samples"] + 1, 4).astype(np.int64)
        counted.append((mds.EMPTY_SHARD + int(np.sum(np.diff(offsets) + 4)), int(offsets[1] - offsets[0]) + 4))
    assert len(counted) > 3
    assert all(size <= limit for size, _ in counted)
    assert all(size + first > limit for (size, _), (_, first) in zip(counted, counted[1:]))


def test_mds_sample_header_holds_the_length_in_the_smallest_dtype() -> None:
    from packcli.export import mds

    header = np.frombuffer(mds.sample_header(300), dtype=np.uint8)
    assert len(header) == 4 + 1 + 2 and header[4] == (1 << 2) | 1  # uint16 length
    assert header[:4].view(np.uint32)[0] == 1 + 2 + 4 * 300 and header[5:].view(np.uint16)[0] == 300
    assert mds.sample_header(3)[4] == (1 << 2) | 0 and len(mds.sample_header(3)) == 6
    assert mds.sample_header(70_000)[4] == (1 << 2) | 2 and len(mds.sample_header(70_000)) == 9


# -- publication, refusals, the sample corpus ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first records of the bundled sample (no ../shared needed), packed with the bundled tokenizer."""
    root = tmp_path_factory.mktemp("small")
    corpus = write_jsonl(root / "small.jsonl", read_jsonl(SAMPLE)[:12])
    run("pack", corpus, "--max-len", "128", "--out", root / "packed", "--quiet")
    return root / "packed"


@pytest.mark.parametrize("fmt", ["megatron", "olmo-core", "nanotron", "bridge", "mds"])
def test_the_sequences_an_export_reports_are_those_it_stores(small_packed: Path, tmp_path: Path, fmt: str) -> None:
    """The formats that write split documents whole store one sequence per input document; the row formats one per
    packed row. The count said is what the files hold, never the pieces the documents were read back from."""
    manifest = json.loads((small_packed / "manifest.json").read_text())
    assert manifest["totals"]["split_documents"] > 0
    totals = export(small_packed, fmt, tmp_path / fmt)["totals"]
    if fmt in ("bridge", "mds"):
        assert totals["sequences"] == manifest["totals"]["sequences"]
    else:
        assert totals["sequences"] == totals["documents"] == manifest["totals"]["input_documents"]
    if fmt == "nanotron":
        assert len(np.fromfile(tmp_path / fmt / "packcli.ds.index", dtype=np.uint64)) == totals["sequences"]
    said = run("export", small_packed, "--to", fmt, "--out", tmp_path / f"{fmt}-2").stdout
    assert f"in {totals['sequences']:,} sequence" in said


def test_export_is_atomic_and_a_rerun_is_a_no_op(small_packed: Path, tmp_path: Path) -> None:
    packed = small_packed
    out = tmp_path / "olmo"
    first = export(packed, "olmo-core", out)
    assert first["status"] == "exported"
    stamp = (out / "tokens.npy").stat().st_mtime_ns
    again = export(packed, "olmo-core", out)
    assert again["status"] == "up-to-date" and (out / "tokens.npy").stat().st_mtime_ns == stamp
    # --json says the same either way: export.json's record, with the status and out
    record = json.loads((out / "export.json").read_text())
    assert {**first, "status": "up-to-date"} == again == {**record, "status": "up-to-date", "out": str(out)}
    result = RUNNER.invoke(app, ["export", str(packed), "--to", "nanotron", "--out", str(out)])
    assert result.exit_code == 1 and "--overwrite" in result.output
    export(packed, "nanotron", out, "--overwrite")
    assert sorted(path.name for path in out.iterdir()) == [
        "export.json", "packcli.ds", "packcli.ds.index", "packcli.ds.metadata",
    ]  # fmt: skip
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".")]  # no staging or lock left
    tokens = np.fromfile(out / "packcli.ds", dtype=np.uint16)
    assert tokens.tolist() == [t for document in expected_documents(packed) for t in document["tokens"]]


def test_every_key_of_export_json_is_documented(small_packed: Path, tmp_path: Path) -> None:
    """``export --json`` (exported, then up to date, with an option) gives only keys docs/cli.md's export section
    names."""
    documented = documented_names("cli.md", "## export")
    for _ in range(2):
        summary = export(small_packed, "bridge", tmp_path / "bridge", "--pad-to-multiple", "8")
        assert json_keys(summary) - documented == set(), summary["status"]


def files_in(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_an_export_of_something_else_is_refused_saying_what_differs(small_packed: Path, tmp_path: Path) -> None:
    """Another format, another packed output, other options, or a damaged export at --out: one line saying which,
    and what to do; the export there is untouched. The same export again is up to date."""
    out = tmp_path / "out"
    export(small_packed, "megatron", out)
    kept = files_in(out)
    assert export(small_packed, "megatron", out)["status"] == "up-to-date"
    other = tmp_path / "other"
    run("pack", next(small_packed.parent.glob("*.jsonl")), "--max-len", "256", "--out", other, "--quiet")
    asked = {
        "another format (megatron there, olmo-core now)": [small_packed, "--to", "olmo-core"],
        f"another packed output ({small_packed} there, {other} now": [other, "--to", "megatron"],
    }
    for difference, arguments in asked.items():
        result = RUNNER.invoke(app, ["export", *map(str, arguments), "--out", str(out)])
        assert result.exit_code == 1 and error_line(result.stderr), result.stderr
        assert error_line(result.stderr).startswith(f"error: {out}: holds another export: {difference}")
        assert result.stderr.endswith("pass --overwrite to replace it, or choose another --out to keep both\n")
        assert files_in(out) == kept
    bridge = tmp_path / "bridge"
    export(small_packed, "bridge", bridge)
    result = RUNNER.invoke(app, ["export", str(small_packed), "--to", "bridge", "--pad-to-multiple", "8", "--out", str(bridge)])  # fmt: skip
    assert result.exit_code == 1 and "holds another export: other export options (none there, pad_to_multiple=8 now)" in result.stderr  # fmt: skip
    with (out / "tokens.idx").open("ab") as handle:
        handle.write(b"\0")
    result = RUNNER.invoke(app, ["export", str(small_packed), "--to", "megatron", "--out", str(out)])
    assert result.exit_code == 1 and error_line(result.stderr)
    assert "holds an incomplete or damaged export of this output, format and options (tokens.idx" in result.stderr
    assert export(small_packed, "megatron", out, "--overwrite")["status"] == "exported" and files_in(out) == kept


def test_an_export_and_a_pack_output_never_replace_each_other(small_packed: Path, tmp_path: Path) -> None:
    """--out naming a pack output for an export, or an export for a pack: one line saying what is there, even with
    --overwrite, and nothing changed."""
    packed = tmp_path / "packed"
    shutil.copytree(small_packed, packed)
    exported = tmp_path / "exported"
    export(small_packed, "nanotron", exported)
    before = {directory: files_in(directory) for directory in (packed, exported)}
    corpus = next(small_packed.parent.glob("*.jsonl"))
    for overwrite in ([], ["--overwrite"]):
        result = RUNNER.invoke(app, ["export", str(small_packed), "--to", "megatron", "--out", str(packed), *overwrite])
        assert result.exit_code == 1 and error_line(result.stderr) == (
            f"error: {packed}: is a packcli output (manifest.json), not an export: an export never replaces one, "
            "even with --overwrite; choose another --out"
        )
        result = RUNNER.invoke(app, ["pack", str(corpus), "--max-len", "64", "--out", str(exported), *overwrite])
        assert result.exit_code == 1 and error_line(result.stderr) == (
            f"error: {exported}: is a packcli export (export.json), not an output of packcli pack: pack never "
            "replaces one, even with --overwrite; choose another --out"
        )
    assert {directory: files_in(directory) for directory in (packed, exported)} == before


def test_an_output_failing_verify_is_refused_before_anything_is_written(small_packed: Path, tmp_path: Path) -> None:
    packed = tmp_path / "packed"
    shutil.copytree(small_packed, packed)
    shard = next(packed.glob("shard-*.arrow"))
    data = bytearray(shard.read_bytes())
    data[-100] ^= 0xFF
    shard.write_bytes(bytes(data))
    result = RUNNER.invoke(app, ["export", str(packed), "--to", "megatron", "--out", str(tmp_path / "mg")])
    assert result.exit_code == 1 and "fails verify" in result.output
    assert not (tmp_path / "mg").exists()
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".")]


def test_an_output_url_failing_verify_is_named_by_its_url(s3_server: Any, small_packed: Path, tmp_path: Path) -> None:
    """An output in the store that fails verify is named as given, never by a local path (export once read it through
    a temporary local copy and named that: ``/tmp/packcli-remote-.../<key>: fails verify``)."""
    fs, url = s3_server.filesystem(), f"{s3_server.bucket()}/packed"
    fs.put(f"{small_packed}/", url, recursive=True)
    shard = json.loads((small_packed / "manifest.json").read_text())["shards"][0]["file"]
    data = bytearray((small_packed / shard).read_bytes())
    data[-100] ^= 0xFF
    fs.pipe(f"{url}/{shard}", bytes(data))
    result = RUNNER.invoke(app, ["export", url, "--to", "megatron", "--out", str(tmp_path / "mg")])
    assert result.exit_code == 1 and result.stderr.startswith(f"error: {url}: fails verify"), result.output
    assert "packcli-remote-" not in result.stderr and not (tmp_path / "mg").exists()


@pytest.mark.parametrize("fmt", ["megatron", "bridge", "olmo-core", "nanotron", "mds"])
def test_damage_found_after_the_export_began_leaves_nothing_written(
    packed_text: Path, tmp_path: Path, fmt: str
) -> None:
    """The export writes while verify reads: a shard damaged after others were exported (and its own first batches
    fed) is still refused with verify's first problem, one line, and nothing at --out nor beside it."""
    packed = tmp_path / "packed"
    shutil.copytree(packed_text, packed)
    shards = sorted(packed.glob("shard-*.arrow"))
    assert len(shards) >= 3
    data = bytearray(shards[-1].read_bytes())
    data[len(data) * 3 // 4] ^= 0x01
    shards[-1].write_bytes(bytes(data))
    report = verify_output(packed)
    first = report.problems[0]
    assert first.startswith(shards[-1].name)
    result = RUNNER.invoke(app, ["export", str(packed), "--to", fmt, "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert error_line(result.stderr) == (
        f"error: {packed}: fails verify ({report.count} problem(s); first: {first}); nothing was exported: run "
        "packcli verify "
        "on it, or pack it again"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["packed"]  # no output, staging or lock left


def test_an_edited_split_pieces_entry_is_refused_before_the_exporter_meets_it(
    packed_text: Path, tmp_path: Path
) -> None:
    """An entry naming a row its shard lacks: the refusal is verify's (the piece the entry named is left a whole
    document without EOS, and the entry names nothing), not the exporter's."""
    packed = tmp_path / "packed"
    shutil.copytree(packed_text, packed)
    manifest = json.loads((packed / "manifest.json").read_text())
    shard = manifest["shards"][0]
    entries, digests = listed_split_pieces(packed, shard), sidecar_digests(packed, shard)
    entries[0][0] = 10**6
    rewrite_split_pieces(packed, shard, entries, digests)
    (packed / "manifest.json").write_text(json.dumps(manifest))
    result = RUNNER.invoke(app, ["export", str(packed), "--to", "nanotron", "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and error_line(result.stderr)
    assert "fails verify (2 problem(s); first: shard-00000.arrow: 1 document(s) that do not end with the EOS" in (
        result.stderr
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["packed"]


def sidecar_digests(packed: Path, shard: dict[str, Any]) -> list[int]:
    """The ``digest`` column of a shard's split_pieces sidecar, read with pyarrow alone."""
    path = packed / shard["sidecars"]["split_pieces"]["file"]
    digests: list[int] = pa.ipc.open_stream(path.read_bytes()).read_all()["digest"].to_pylist()
    return digests


@pytest.mark.parametrize("fmt", ["nanotron", "megatron"])
def test_two_split_pieces_numbered_the_other_way_round_are_refused_not_exported_scrambled(
    packed_text: Path, tmp_path: Path, fmt: str
) -> None:
    """Two pieces of one document with their numbers swapped in the sidecar (size and sha256 fixed in the
    manifest): verify knows what pack cut as each piece (its digest), so the export is refused and writes nothing,
    instead of joining the document in the wrong order with exit 0."""
    packed = tmp_path / "packed"
    shutil.copytree(packed_text, packed)
    manifest = json.loads((packed / "manifest.json").read_text())
    shard, first, second = next(
        (shard, place[(document, 0)], place[(document, 1)])
        for shard in manifest["shards"]
        if "sidecars" in shard
        for place in [{(entry[2], entry[3]): k for k, entry in enumerate(listed_split_pieces(packed, shard))}]
        for document, piece in place
        if piece == 0 and (document, 1) in place
    )  # a document's first two pieces in one shard
    entries, digests = listed_split_pieces(packed, shard), sidecar_digests(packed, shard)
    entries[first][3], entries[second][3] = 1, 0
    rewrite_split_pieces(packed, shard, entries, digests)
    (packed / "manifest.json").write_text(json.dumps(manifest))
    result = RUNNER.invoke(app, ["export", str(packed), "--to", fmt, "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert "fails verify" in result.stderr and "nothing was exported" in result.stderr
    verified = RUNNER.invoke(app, ["verify", str(packed)])
    assert verified.exit_code == 1
    assert "whose tokens are not what pack cut as that piece of that document (its digest differs)" in verified.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["packed"]


def test_export_refuses_what_is_not_its_own(small_packed: Path, tmp_path: Path) -> None:
    packed = small_packed
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    result = RUNNER.invoke(app, ["export", str(packed), "--to", "megatron", "--out", str(out)])
    assert result.exit_code == 1 and "notes.txt" in result.output
    result = RUNNER.invoke(app, ["export", str(packed), "--to", "parquet", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "--to must be one of" in result.output
    result = RUNNER.invoke(app, ["export", str(packed), "--to", "mds", "--pad-to-multiple", "8", "--out", str(tmp_path / "x")])  # fmt: skip
    assert result.exit_code == 2 and "--pad-to-multiple is for --to bridge" in result.output


@pytest.mark.parametrize("multiple", ["0", "-8", "129", "4611686018427387904", "99999999999999999999"])
def test_a_pad_multiple_outside_1_to_max_len_is_a_usage_error(
    small_packed: Path, tmp_path: Path, multiple: str
) -> None:
    """--pad-to-multiple pads every document to a multiple of M: an M above max_len (128 here) would pad each past
    the pack size (and a huge one overflowed numpy); below 1 pads nothing. One line, exit 2, nothing written,
    from the command line and from Python alike."""
    from packcli.errors import UsageError
    from packcli.export import export_output

    out = tmp_path / "bridge"
    result = RUNNER.invoke(app, ["export", str(small_packed), "--to", "bridge", "--pad-to-multiple", multiple, "--out", str(out)])  # fmt: skip
    assert result.exit_code == 2 and error_line(result.stderr), result.output
    assert "--pad-to-multiple" in result.stderr and "unexpected" not in result.stderr
    with pytest.raises(UsageError, match="--pad-to-multiple"):
        export_output(small_packed, "bridge", out, {"pad_to_multiple": int(multiple)})
    assert sorted(tmp_path.iterdir()) == []


def test_a_pad_multiple_that_pads_a_batch_past_int32_is_refused_before_it_is_built(tmp_path: Path) -> None:
    """3,000 two-token documents in one row at max_len 2**20, each padded to a multiple of 2**20: 3.1 billion tokens,
    more than a Parquet list<int32> holds (and 12 GiB as int32). Refused in one line (exit 2) before any of it is
    allocated, nothing written."""
    corpus = write_jsonl(tmp_path / "ids.jsonl", [{"ids": [7]}] * 3000)
    packed = tmp_path / "packed"
    run("pack", corpus, "--ids-field", "ids", "--eos-id", "0", "--max-len", str(2**20), "--out", packed, "--quiet")
    out = tmp_path / "bridge"
    result = RUNNER.invoke(app, ["export", str(packed), "--to", "bridge", "--pad-to-multiple", str(2**20), "--out", str(out)])  # fmt: skip
    assert result.exit_code == 2 and error_line(result.stderr), result.output
    assert "--pad-to-multiple 1048576" in result.stderr and "2,147,483,647" in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ids.jsonl", "packed"]


def test_an_export_is_never_read_as_a_corpus(small_packed: Path, tmp_path: Path) -> None:
    """An export named to stats or pack is refused as an export (one line, exit 1), not read as a JSON corpus
    (export.json) with an invalid-JSON error; found inside an input directory it is skipped, saying so, as an output
    is, and the corpus beside it packs alone."""
    exported = tmp_path / "data" / "megatron"
    export(small_packed, "megatron", exported)
    for command in (["stats", str(exported)], ["pack", str(exported), "--out", str(tmp_path / "o")]):
        result = RUNNER.invoke(app, command)
        assert result.exit_code == 1 and error_line(result.stderr), result.output
        assert error_line(result.stderr).startswith(
            f"error: {exported}: is a packcli export (export.json), not a corpus"
        )
    shutil.copy(next(small_packed.parent.glob("*.jsonl")), tmp_path / "data" / "corpus.jsonl")
    result = RUNNER.invoke(app, ["pack", str(tmp_path / "data"), "--max-len", "128", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert f"skipping {exported}: a packcli export, not input" in result.stderr


def test_an_export_named_where_an_output_is_wanted_is_called_an_export(small_packed: Path, tmp_path: Path) -> None:
    """show, verify and export given an export (not the output it came from) say so in one line, exit 1, rather
    than 'not a packcli output (run packcli pack first)', which it was made from."""
    exported = tmp_path / "megatron"
    export(small_packed, "megatron", exported)
    for command in (["show", str(exported)], ["verify", str(exported)], ["export", str(exported), "--to", "mds"]):
        result = RUNNER.invoke(app, [*command, "--out", str(tmp_path / "x")] if command[0] == "export" else command)
        assert result.exit_code == 1 and error_line(result.stderr), result.output
        assert error_line(result.stderr).startswith(
            f"error: {exported}: is a packcli export (export.json), not a packcli output"
        )
    assert not (tmp_path / "x").exists()


def test_an_output_without_split_pieces_is_exported_piece_by_piece_and_says_so(
    text_packed: Path, tmp_path: Path
) -> None:
    """An output packed before split_pieces existed: its pieces are exported as they are stored, with a warning."""
    packed = tmp_path / "old"
    shutil.copytree(text_packed, packed)
    as_packed_before_split_pieces(packed)
    manifest = json.loads((packed / "manifest.json").read_text())
    result = RUNNER.invoke(app, ["export", str(packed), "--to", "nanotron", "--out", str(tmp_path / "nt")])
    assert result.exit_code == 0 and "does not record which pieces belong together" in result.output
    index = np.fromfile(tmp_path / "nt" / "packcli.ds.index", dtype=np.uint64)
    assert len(index) == manifest["totals"]["documents"]  # one per stored piece


def test_export_refuses_a_url_for_its_out_directory(
    small_packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A URL as --out is refused, never taken for the local path it folds to (s3://b/m as ./s3:/b/m, an export
    reported as written into the store while it lies in the working directory)."""
    monkeypatch.chdir(tmp_path)
    result = RUNNER.invoke(app, ["export", str(small_packed), "--to", "megatron", "--out", "s3://bucket/m"])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "s3://bucket/" in result.output and "takes a local path" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_row_format_says_what_it_does_with_split_documents_unless_quiet(text_packed: Path, tmp_path: Path) -> None:
    said = RUNNER.invoke(app, ["export", str(text_packed), "--to", "mds", "--out", str(tmp_path / "said")])
    assert said.exit_code == 0, said.output
    assert "were split by --overflow split: mds stores packed rows" in said.stderr
    quiet = RUNNER.invoke(app, ["export", str(text_packed), "--to", "mds", "--out", str(tmp_path / "q"), "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.output
    assert quiet.stdout.startswith("exported ")
    for path in sorted((tmp_path / "said").iterdir()):
        assert path.read_bytes() == (tmp_path / "q" / path.name).read_bytes(), path.name


@pytest.mark.parametrize("fmt,said", [("olmo-core", True), ("mds", True), ("megatron", True), ("nanotron", False)])
def test_an_output_without_eos_is_exported_saying_where_its_documents_run_together(
    tmp_path: Path, fmt: str, said: bool
) -> None:
    """With --no-eos no document ends in EOS: the formats whose trainers find document ends by EOS (Megatron's
    GPTDataset, OLMo-core, MDS) say so on stderr; nanotron's positions follow its index and it says nothing."""
    corpus = write_jsonl(tmp_path / "small.jsonl", read_jsonl(SAMPLE)[:4])
    packed = tmp_path / "packed"
    run("pack", corpus, "--max-len", "128", "--no-eos", "--out", packed, "--quiet")
    result = RUNNER.invoke(app, ["export", str(packed), "--to", fmt, "--out", str(tmp_path / "x")])
    assert result.exit_code == 0, result.output
    notice = f"packed with --no-eos: no document ends in EOS, and {fmt}'s trainer finds where documents end by EOS"
    assert result.stderr.count(notice) == int(said), result.stderr
    assert all(line.startswith("warning: ") for line in result.stderr.splitlines())  # one line per notice


@pytest.mark.parametrize("fmt,said", [("olmo-core", True), ("megatron", True), ("nanotron", False)])
def test_documents_truncated_without_eos_are_named_where_the_trainer_finds_documents_by_eos(
    small_packed: Path, tmp_path: Path, fmt: str, said: bool
) -> None:
    """--overflow truncate cuts a document at max_len, its EOS with it: where the trainer finds documents by EOS,
    each truncated one runs into the next, and the export says so on stderr with their count (nanotron's index keeps
    them apart, and it says nothing)."""
    corpus = next(small_packed.parent.glob("*.jsonl"))
    packed = tmp_path / "packed"
    run("pack", corpus, "--max-len", "64", "--overflow", "truncate", "--out", packed, "--quiet")
    truncated = json.loads((packed / "manifest.json").read_text())["totals"]["truncated_documents"]
    assert truncated > 0
    ends = [document["tokens"][-1] for document in expected_documents(packed)]
    assert len(ends) - ends.count(50256) == truncated  # every truncated document, and only those, lacks its EOS
    result = RUNNER.invoke(app, ["export", str(packed), "--to", fmt, "--out", str(tmp_path / "x")])
    assert result.exit_code == 0, result.output
    notice = (
        f"warning: {truncated} document(s) were cut at max_len by --overflow truncate, their EOS with them, and "
        f"{fmt}'s trainer finds where documents end by EOS, so each runs into the next there"
    )
    assert result.stderr.count(notice) == int(said), result.stderr


@pytest.mark.parametrize("fmt,said", [("olmo-core", True), ("mds", True), ("nanotron", False)])
def test_eos_ids_inside_documents_are_counted_where_the_trainer_finds_documents_by_eos(
    tmp_path: Path, fmt: str, said: bool
) -> None:
    """Pre-tokenized ids may hold the EOS id inside a document (so may a chat template's rendering): OLMo-core's
    reader, finding documents by EOS, cuts such a document there, so the export says how many EOS ids stand inside
    documents, where the trainer finds documents by EOS (nanotron's index keeps them whole: nothing said)."""
    corpus = write_jsonl(tmp_path / "ids.jsonl", [{"ids": [5, 0, 7, 0, 9]}, {"ids": [8, 9]}])
    packed = tmp_path / "packed"
    run("pack", corpus, "--ids-field", "ids", "--eos-id", "0", "--max-len", "16", "--no-shuffle", "--out", packed, "-q")
    result = RUNNER.invoke(app, ["export", str(packed), "--to", fmt, "--out", str(tmp_path / "x")])
    assert result.exit_code == 0, result.output
    notice = (
        f"warning: 2 EOS id(s) stand inside documents (not at their end), and {fmt}'s trainer finds where documents "
        "end by EOS, so it cuts those documents there"
    )
    assert result.stderr.count(notice) == int(said), result.stderr
    if fmt == "olmo-core":
        from olmo_core.data.utils import iter_document_indices

        path = tmp_path / "x" / "tokens.npy"
        found = list(iter_document_indices(path, eos_token_id=0, dtype=np.uint32, use_array_if_local=True))
        assert len(found) == 4  # two documents read as four: what the warning counts


def test_ids_packed_without_a_tokenizer_export_as_32_bit_tokens_and_datatrove_metadata(tmp_path: Path) -> None:
    """Pre-tokenized ids above 65535 and no tokenizer (vocabulary unknown): 32-bit tokens in every document format,
    and nanotron's metadata names the tokenizer as datatrove's merger parses it (``NAME|TOKEN_SIZE``, one bar)."""
    ids = [[70_000 + k, 5, 2**31 - 1 - k] for k in range(5)]
    corpus = write_jsonl(tmp_path / "ids.jsonl", [{"ids": record} for record in ids])
    packed = tmp_path / "packed"
    run("pack", corpus, "--ids-field", "ids", "--eos-id", "0", "--max-len", "16", "--out", packed, "--quiet")
    documents = sorted([*record, 0] for record in ids)
    export(packed, "nanotron", tmp_path / "nt")
    name, token_size = (tmp_path / "nt" / "packcli.ds.metadata").read_text().splitlines()[0].split("|")
    assert (name, token_size) == ("Unknown Tokenizer", "4")
    index = np.fromfile(tmp_path / "nt" / "packcli.ds.index", dtype=np.uint64)
    assert (
        sorted(
            split_by(
                np.fromfile(tmp_path / "nt" / "packcli.ds", dtype=np.uint32), np.diff(index.astype(np.int64), prepend=0)
            )
        )
        == documents
    )
    export(packed, "megatron", tmp_path / "mg")
    dataset = megatron_dataset(tmp_path / "mg" / "tokens")
    assert dataset.index.dtype == np.int32 and sorted(dataset[i].tolist() for i in range(len(dataset))) == documents
    export(packed, "olmo-core", tmp_path / "olmo")
    tokens = np.fromfile(tmp_path / "olmo" / "tokens.npy", dtype=np.uint32)
    assert sorted(split_by(tokens, [4] * 5)) == documents


@pytest.mark.parametrize("fmt,said", [("olmo-core", True), ("nanotron", True), ("megatron", False), ("mds", False)])
def test_ids_without_a_tokenizer_say_the_token_type_where_the_reader_assumes_one(
    tmp_path: Path, fmt: str, said: bool
) -> None:
    """GPT-2 ids packed without a tokenizer: the vocabulary is unknown, so the tokens are written 32-bit, but
    OLMo-core's config given GPT-2 assumes uint16 (``get_dtype``), and nanotron's Nanoset 2-byte tokens for a
    vocabulary of at most 65,536 ids: read so, every token comes back wrong, silently. The export says the type it
    wrote and what the reader must be told; formats whose files carry their type (megatron's index, MDS's column
    encoding) say nothing."""
    from olmo_core.data import NumpyFSLDatasetConfig, TokenizerConfig

    corpus = write_jsonl(tmp_path / "ids.jsonl", [{"ids": [40, 1842, 257, 3797]}, {"ids": [464, 3290]}])
    packed = tmp_path / "packed"
    run("pack", corpus, "--ids-field", "ids", "--eos-id", "50256", "--max-len", "16", "--out", packed, "--quiet")
    assert NumpyFSLDatasetConfig(paths=["x"], sequence_length=8, tokenizer=TokenizerConfig.gpt2()).get_dtype() is (
        np.uint16
    )  # what OLMo-core reads for GPT-2 unless told otherwise
    result = RUNNER.invoke(app, ["export", str(packed), "--to", fmt, "--out", str(tmp_path / "x")])
    assert result.exit_code == 0, result.output
    notice = f"warning: this output was packed from token ids without a tokenizer, so {fmt}'s tokens are uint32"
    assert result.stderr.count(notice) == int(said), result.stderr
    assert result.stderr.count("\n") == int(said)


def test_an_output_url_exports_without_a_local_copy_of_its_shards(
    s3_server: S3Server, tiny_corpus: Path, tmp_path: Path
) -> None:
    """An output in the store (no split document: its pieces would be read out of order) is verified and exported as
    its shards stream in: a process that can write no file as large as its largest shard (but each export file), its
    $TMPDIR empty after, writes the export of the output on disk (it copied the output to $TMPDIR first)."""
    packed = tmp_path / "packed"
    args = ["--max-len", "512", "--overflow", "truncate", "--shard-size", "500KB", "--out", str(packed), "--quiet"]
    assert RUNNER.invoke(app, ["pack", str(tiny_corpus), *args]).exit_code == 0
    here = RUNNER.invoke(app, ["export", str(packed), "--to", "megatron", "--out", str(tmp_path / "from-disk")])
    assert here.exit_code == 0, here.output
    largest = max(shard["bytes"] for shard in json.loads((packed / "manifest.json").read_text())["shards"])
    written = {path.name: path.read_bytes() for path in (tmp_path / "from-disk").iterdir()}
    assert max(len(data) for data in written.values()) < largest // 2
    url = put_output(s3_server, packed)
    there = run_writing_no_file_over(
        largest // 2, tmp_path / "tmp", "export", url, "--to", "megatron", "--out", str(tmp_path / "from-store")
    )
    assert there.returncode == 0, there.stderr
    assert {name: (tmp_path / "from-store" / name).read_bytes() for name in ("tokens.bin", "tokens.idx")} == {
        name: written[name] for name in ("tokens.bin", "tokens.idx")
    }
    assert not list((tmp_path / "tmp").iterdir())


def test_an_output_url_with_split_documents_reads_each_shard_object_at_most_twice(
    s3_server: S3Server, packed_text: Path, tmp_path: Path
) -> None:
    """Split documents come out whole where their first piece stood, their later pieces read out of order: from an
    output in the store, each shard object is read by verify's pass and at most once more for the pieces it holds
    (a whole shard was fetched again on each miss of a four-shard cache: up to ten times each), counted in the server's
    log of requests; the export is the one of the output on disk."""
    manifest = json.loads((packed_text / "manifest.json").read_text())
    assert manifest["totals"]["split_documents"] and max(shard["bytes"] for shard in manifest["shards"]) < 8 << 20
    url = put_output(s3_server, packed_text)
    with s3_server.recorded() as requests:
        there = RUNNER.invoke(app, ["export", url, "--to", "megatron", "--out", str(tmp_path / "from-store")])
    assert there.exit_code == 0, there.output
    reads = Counter(key for method, key in requests if method == "GET" and key.endswith(".arrow"))
    assert len(reads) == len(manifest["shards"]) and max(reads.values()) <= 2, reads  # each shard one GET a read
    here = RUNNER.invoke(app, ["export", str(packed_text), "--to", "megatron", "--out", str(tmp_path / "from-disk")])
    assert here.exit_code == 0, here.output
    for name in ("tokens.bin", "tokens.idx"):
        assert (tmp_path / "from-store" / name).read_bytes() == (tmp_path / "from-disk" / name).read_bytes()


@pytest.fixture(scope="module")
def packed_without_positions(corpora: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``text_packed`` and ``sft_packed``'s corpora packed the same way with ``--no-position-ids``."""
    root = tmp_path_factory.mktemp("lean")
    common = ["--tokenizer", corpora["tokenizer"], "--max-len", "256", "--no-position-ids", "--quiet"]
    run("pack", corpora["code"], *common, "--out", root / "text")
    sft = ["--prompt-field", "prompt", "--response-field", "response", "--overflow", "split"]
    run("pack", corpora["sft"], *common, *sft, "--out", root / "sft")
    return {"text": root / "text", "sft": root / "sft"}


@pytest.mark.parametrize("fmt", ["megatron", "olmo-core", "nanotron", "bridge", "mds"])
def test_an_export_is_the_same_bytes_with_or_without_stored_position_ids(
    text_packed: Path, sft_packed: Path, packed_without_positions: dict[str, Path], tmp_path: Path, fmt: str
) -> None:
    """Every file of an export but its record (which names the source fingerprint) is byte for byte the same from
    an output packed with ``--no-position-ids``."""
    kind, full = ("sft", sft_packed) if fmt == "bridge" else ("text", text_packed)
    export(full, fmt, tmp_path / "full")
    export(packed_without_positions[kind], fmt, tmp_path / "lean")
    expected, got = files_in(tmp_path / "full"), files_in(tmp_path / "lean")
    assert expected.pop("export.json") != got.pop("export.json")
    assert expected == got and expected
