"""``packcli.pack()``: the Python door for Hugging Face users. A ``datasets.Dataset`` (or ``IterableDataset``, or
paths as on the command line) in, the packed output written as ``packcli pack`` writes it, and that output back as
a ``datasets.Dataset`` memory-mapped from its shards (no copy), ready for a Trainer with packcli's collators.

A dataset is streamed, a thousand records at a time, into one Arrow stream file in a temporary directory holding
only the columns the options name (``text_field``, ``prompt_field``/``response_field``, ``messages_field``,
``ids_field``, ``labels_field``), which ``pack`` then reads like any input: the same records from a dataset and
from a file give the same shards. The file is a spool (:class:`~packcli.read.inputs.Spool`): the output knows it by
the sha256 of its bytes and names it ``<dataset>``, so packing the same records again is "up to date", and a bad
record is named ``<dataset>:ROW``. ``datasets`` is imported only here, when called, so the command line never pays
for it. Needs the ``hf`` extra (``pip install 'packcli[hf]'``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from packcli.errors import PackcliError, UsageError, requires_extra
from packcli.options import PackOptions, parse_size
from packcli.read.inputs import Spool
from packcli.util.files import file_sha256

__all__ = ["pack"]

BATCH_RECORDS = 1000
DATASET_NAME = "<dataset>"  # how messages and the manifest name a dataset given to pack()
FIELD_OPTIONS = ("text_field", "prompt_field", "response_field", "messages_field", "ids_field", "labels_field")


def pack(
    source: Any,
    *,
    max_len: int,
    out: str | Path,
    tokenizer: str | None = None,
    overwrite: bool = False,
    **options: Any,
) -> Any:
    """Pack ``source`` into ``out`` and return the packed rows as a ``datasets.Dataset``.

    Args:
        source: a ``datasets.Dataset`` or ``IterableDataset``, or a path (or list of paths, directories, globs) as
            ``packcli pack`` takes them.
        max_len: tokens per packed sequence.
        out: the output directory (Arrow shards + manifest.json).
        tokenizer: as ``--tokenizer`` (default: the bundled GPT-2).
        overwrite: replace an existing, different output.
        options: the other ``pack`` options, by their :class:`~packcli.options.PackOptions` names (``strategy``,
            ``text_field``, ``prompt_field``, ``response_field``, ``overflow``, ``seed``, ``shuffle``, ``shard_size``
            as bytes or text like "64MiB", ...).

    Raises:
        UsageError: an unknown option, or a dataset without the columns the options name.
        PackcliError: as ``packcli pack`` (a bad record, an output in the way, ...).
    """
    with requires_extra("hf", "packcli.pack()"):
        import datasets

    known = {field.name for field in fields(PackOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise UsageError(f"unknown pack option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    if isinstance(options.get("shard_size"), str):
        options["shard_size"] = parse_size(options["shard_size"])
    pack_options = PackOptions(max_len=max_len, tokenizer=tokenizer, **options)
    out = Path(out)
    if isinstance(source, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise UsageError(
            f"packcli.pack() takes one dataset, not a dict of splits ({', '.join(source)}): pass one, e.g. "
            f"source[{next(iter(source), 'train')!r}]"
        )
    if isinstance(source, (datasets.Dataset, datasets.IterableDataset)):
        with tempfile.TemporaryDirectory(prefix="packcli-dataset-") as scratch:
            path = Path(scratch) / "dataset.arrow"
            _write_stream(path, _record_batches(source, _named_columns(pack_options)))
            spool = Spool(path, file_sha256(path), DATASET_NAME)
            try:
                manifest = _pack([str(path)], pack_options, out, overwrite, spool)
            except PackcliError as error:
                spool.rename(error)
                raise
    else:
        inputs = [str(source)] if isinstance(source, (str, Path)) else [str(item) for item in source]
        manifest = _pack(inputs, pack_options, out, overwrite)
    shards = [datasets.Dataset.from_file(str(out / shard["file"])) for shard in manifest["shards"]]
    return datasets.concatenate_datasets(shards) if len(shards) != 1 else shards[0]


def _pack(
    inputs: list[str], options: PackOptions, out: Path, overwrite: bool, spool: Spool | None = None
) -> dict[str, Any]:
    from packcli.run.driver import pack_corpus

    return pack_corpus(inputs, options, out, overwrite=overwrite, stdin=spool).manifest


def _named_columns(options: PackOptions) -> list[str]:
    """The dataset columns ``pack`` reads under ``options``."""
    named = [getattr(options, option) for option in FIELD_OPTIONS]
    if options.fine_tuning or options.ids_field is not None:
        named[0] = None  # the text field is not read
    return [name for name in named if name is not None]


def _record_batches(source: Any, columns: Sequence[str]) -> Iterator[Any]:
    """The named columns of ``source``, as Arrow tables of up to BATCH_RECORDS records."""
    import pyarrow as pa

    present = source.column_names  # None: an IterableDataset whose features are not known before reading
    missing = [column for column in columns if present is not None and column not in present]
    if missing:
        raise UsageError(
            f"the dataset has no column {missing[0]!r} (columns: {', '.join(present)}); name its column with the "
            "matching option (text_field=..., prompt_field=..., ...)"
        )
    for batch in source.select_columns(list(columns)).iter(batch_size=BATCH_RECORDS):
        yield pa.Table.from_pydict({column: batch[column] for column in columns})


def _write_stream(path: Path, tables: Iterator[Any]) -> None:
    """Write tables as one Arrow IPC stream (the schema of the first; an empty dataset gives an empty file)."""
    import pyarrow as pa

    writer, schema = None, None
    with open(path, "wb") as sink:
        for table in tables:
            if writer is None:
                schema = table.schema
                writer = pa.ipc.new_stream(sink, schema)
            writer.write_table(table.cast(schema))
        if writer is not None:
            writer.close()
