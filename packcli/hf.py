"""``packcli.pack()``: the Python door for Hugging Face users. A ``datasets.Dataset`` (or ``IterableDataset``, or
paths as on the command line) in, the packed output written as ``packcli pack`` writes it, and that output back as
a ``datasets.Dataset`` memory-mapped from its shards (no copy), ready for a Trainer with packcli's collators.

A dataset is streamed, a thousand records at a time, into one Arrow stream file in a temporary directory holding
only the columns the options name (``text_field``, ``prompt_field``/``response_field``, ``messages_field`` and
``tools_field`` where the dataset has that column, ``ids_field``, ``labels_field``), which ``pack`` then reads like
any input: the same records from a dataset and from a file give the same shards. The file is a spool
(:class:`~packcli.read.inputs.Spool`): the output knows it by the sha256 of its bytes and names it ``<dataset>``, so
packing the same records again is "up to date", and a bad record is named ``<dataset>:ROW``. ``datasets`` is
imported only here, when called, so the command line never pays for it. Needs the ``hf`` extra (``pip install
'packcli[hf]'``).
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from packcli.errors import (
    DataLossNotice,
    PackcliDataLossWarning,
    PackcliError,
    UsageError,
    keyword_spelling,
    option,
    requires_extra,
)
from packcli.options import PackOptions
from packcli.read.inputs import Spool
from packcli.storage.urls import is_url
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
        out: the output directory (Arrow shards + manifest.json), local: the result is memory-mapped from it.
        tokenizer: as ``--tokenizer`` (default: the bundled GPT-2).
        overwrite: replace an existing, different output.
        options: the other ``pack`` options, by their :class:`~packcli.options.PackOptions` names (``strategy``,
            ``text_field``, ``prompt_field``, ``response_field``, ``overflow``, ``seed``, ``shuffle``, ``shard_size``
            and ``partition_size`` as bytes or text like "64MiB", ``target_tokens`` as a number or text like "3M",
            ``weights`` as a list of numbers (no bool, no string: text is one string) or text like "0.7,0.3":
            parsed as the command line parses them, :meth:`~packcli.options.PackOptions.from_values`; None only
            where the option's default is None). A dataset is never partitioned: ``partitions=1`` is the plain run,
            more is refused.

    Warns:
        PackcliDataLossWarning: for each loss ``packcli pack`` warns of: overflow drop or truncate losing more than
            1% of the tokens, chat messages whose special-token text the template made special tokens, files in
            the inputs that are not read, bad records skipped (``skip_bad_records=True``), a chat template whose
            assistant headers take loss (no add_generation_prompt branch); also when the output is up to date.

    Raises:
        UsageError: an unknown option or one of the wrong type, None included where it is no default (numpy's
            integers and booleans are taken as plain ones), an ``out`` URL, a dataset with partitions, or a
            dataset without the columns the options name.
        PackcliError: as ``packcli pack`` (a bad record, an output in the way, ...), and a streamed column whose
            type changes between rows (other than a batch of None). Messages name keyword arguments where the
            command line names flags (``overwrite=True``, not ``--overwrite``).
    """
    notices: list[str] = []
    with keyword_spelling():  # said to a Python caller: keyword arguments, not command-line flags
        rows, manifest = _pack_source(source, max_len, out, tokenizer, overwrite, options, notices)
        losses = [*notices, *data_losses(manifest)]
    for loss in losses:
        warnings.warn(loss, PackcliDataLossWarning, stacklevel=2)
    return rows


def data_losses(manifest: dict[str, Any]) -> list[str]:
    """What ``packcli pack`` warns of as lost or changed in this output: tokens dropped or truncated (over 1% of
    them), chat messages whose special-token text became special tokens, a ``tools_field`` no record holds, files
    found but not read, and bad records skipped."""
    from packcli.read.inputs import FORMATS_READ
    from packcli.report.terminal import count, loss_warning, special_text_warning, tools_warning

    totals = manifest["totals"]
    losses = [
        loss_warning(totals, manifest["max_len"]),
        special_text_warning(totals),
        tools_warning(totals, manifest["options"].get("tools_field", "")),
    ]
    if totals.get("unread_files"):
        losses.append(
            f"{count(totals['unread_files'], 'file')} found in the inputs not read (packcli reads {FORMATS_READ}): "
            "counted in its totals.unread_files"
        )
    if totals["bad_records"]:
        losses.append(
            f"{count(totals['bad_records'], 'bad record')} skipped ({option('skip_bad_records', True)}): not in the "
            "output, counted in its totals.bad_records"
        )
    return [loss for loss in losses if loss is not None]


def _pack_source(
    source: Any,
    max_len: int,
    out: str | Path,
    tokenizer: str | None,
    overwrite: bool,
    options: dict[str, Any],
    notices: list[str],
) -> tuple[Any, dict[str, Any]]:
    """The packed rows of ``source`` as a ``datasets.Dataset``, and the output's manifest; the run's
    :class:`~packcli.errors.DataLossNotice` warnings are appended to ``notices``."""
    with requires_extra("hf", "packcli.pack()"):
        import datasets

    pack_options = PackOptions.from_values({"max_len": max_len, "tokenizer": tokenizer, **options})
    if is_url(str(out)):
        raise UsageError(
            f"packcli.pack() returns the output memory-mapped: out must be a local directory, not {out}; pack to a "
            "URL with `packcli pack --out URL`"
        )
    out = Path(out)
    if isinstance(source, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise UsageError(
            f"packcli.pack() takes one dataset, not a dict of splits ({', '.join(source)}): pass one, e.g. "
            f"source[{next(iter(source), 'train')!r}]"
        )
    if isinstance(source, (datasets.Dataset, datasets.IterableDataset)):
        pack_options = _unpartitioned(pack_options)
        with tempfile.TemporaryDirectory(prefix="packcli-dataset-") as scratch:
            path = Path(scratch) / "dataset.arrow"
            columns = _named_columns(pack_options, _column_names(source))
            _write_stream(path, _record_batches(source, columns), columns)
            spool = Spool(path, file_sha256(path), DATASET_NAME)
            try:
                manifest = _pack([str(path)], pack_options, out, overwrite, notices, spool)
            except PackcliError as error:
                spool.rename(error)
                raise
    else:
        inputs = [str(source)] if isinstance(source, (str, Path)) else [str(item) for item in source]
        manifest = _pack(inputs, pack_options, out, overwrite, notices)
    shards = [datasets.Dataset.from_file(str(out / shard["file"])) for shard in manifest["shards"]]
    return datasets.concatenate_datasets(shards) if len(shards) != 1 else shards[0], manifest


def _unpartitioned(options: PackOptions) -> PackOptions:
    """The options of a dataset's run, which is never partitioned: ``partitions=1`` on the local engine is the plain
    run, as ``-`` makes it on the command line.

    Raises:
        UsageError: any other partitioned run (the spool is a local temporary file, and it would be cut otherwise
            than the same records in a file).
    """
    options = options.in_one_process()
    if options.partitioned:
        raise UsageError(
            "a dataset cannot be cut into partitions or sent to workers (partitions=1 is the plain run, in this "
            "process): save it to files (dataset.to_json(...), dataset.to_parquet(...)) and pass their paths"
        )
    return options


def _pack(
    inputs: list[str], options: PackOptions, out: Path, overwrite: bool, notices: list[str], spool: Spool | None = None
) -> dict[str, Any]:
    """The manifest of ``inputs`` packed into ``out``; the run's data-loss notices appended to ``notices`` (its other
    warnings, which the command line hides with --quiet, are not said to a Python caller)."""
    from packcli.run.driver import pack_corpus

    def warn(message: str) -> None:
        if isinstance(message, DataLossNotice):
            notices.append(message)

    return pack_corpus(inputs, options, out, overwrite=overwrite, warn=warn, stdin=spool).manifest


def _named_columns(options: PackOptions, present: list[str]) -> list[str]:
    """The dataset columns ``pack`` reads under ``options``: chats' tools column where the dataset (its columns
    ``present``) has it, as a record's tools field is read where the record has it."""
    named = [getattr(options, option) for option in FIELD_OPTIONS]
    if options.fine_tuning or options.ids_field is not None:
        named[0] = None  # the text field is not read
    if options.messages_field is not None and options.tools_field and options.tools_field in present:
        named.append(options.tools_field)
    return [name for name in named if name is not None]


def _column_names(source: Any) -> list[str]:
    """The dataset's columns; an ``IterableDataset`` whose features are not known before reading: its first
    record's."""
    if source.column_names is not None:
        return list(source.column_names)
    return list(next(iter(source), {}))


def _record_batches(source: Any, columns: Sequence[str]) -> Iterator[Any]:
    """The named columns of ``source``, as Arrow tables of up to BATCH_RECORDS records, typed by the dataset's
    features where it has them (a column that is all None in one batch keeps its type)."""
    present = source.column_names  # None: an IterableDataset whose features are not known before reading
    missing = [column for column in columns if present is not None and column not in present]
    if missing:
        raise UsageError(
            f"the dataset has no column {missing[0]!r} (columns: {', '.join(present)}); name its column with the "
            "matching option (text_field=..., prompt_field=..., ...)"
        )
    selected = source.select_columns(list(columns)).with_format("arrow")
    for table in selected.iter(batch_size=BATCH_RECORDS):
        yield table.replace_schema_metadata(None)


def _write_stream(path: Path, tables: Iterator[Any], columns: Sequence[str]) -> None:
    """Write tables as one Arrow IPC stream of the first one's schema. A column that is all None in a later table
    takes that schema's type; any other change of type is an error naming the row (a value is never converted to
    text it was not). An empty dataset gives a stream of string columns and no record."""
    import pyarrow as pa

    writer, schema, rows = None, None, 0
    with open(path, "wb") as sink:
        for table in tables:
            if writer is None:
                schema = table.schema
                writer = pa.ipc.new_stream(sink, schema)
            writer.write_table(_conform(table, schema, rows))
            rows += table.num_rows
        if writer is None:
            writer = pa.ipc.new_stream(sink, pa.schema([(column, pa.string()) for column in columns]))
        writer.close()


def _conform(table: Any, schema: Any, rows_before: int) -> Any:
    """``table`` in ``schema``: its all-None columns cast, any other difference of type refused."""
    import pyarrow as pa

    for index, field in enumerate(schema):
        found = table.schema.field(field.name).type
        if found == field.type:
            continue
        column = table.column(field.name)
        if pa.types.is_null(found):
            table = table.set_column(index, field.name, column.cast(field.type))
            continue
        first = next((row for row, valid in enumerate(column.is_valid().to_pylist()) if valid), 0)
        raise PackcliError(
            f"column {field.name!r} is {found} here, {field.type} in the rows before; give the dataset its "
            "features (datasets.Features) so that every row has one type",
            DATASET_NAME,
            rows_before + first + 1,
        )
    return table
