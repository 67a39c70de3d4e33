"""A loader's resumable state: what :meth:`PackedDataset.state_dict` saves, and the check that a saved state fits the
dataset it is loaded into, so a resume serves every row of an epoch exactly once or is refused in one line.

A state names the output (its fingerprint), the options that decide which rows a rank delivers and in what order
(seed, shuffle, world size, rows, ``drop_last``, the balance cost model and, with balance, ``grad_accum`` and
``balance_ranks``), the
position (epoch and rows delivered) and a digest of the epoch's seeded order. A state without ``balance`` (taken
before balanced steps existed) means no balance.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from packcli.errors import PackcliError

__all__ = ["STATE_VERSION", "Resumable", "check_state", "dataset_state"]

STATE_VERSION = 2  # 2: the state names its output


class Resumable(Protocol):
    """What a state is made of: the :class:`packcli.torch.PackedDataset` attributes it reads."""

    path: Path
    output: str
    epoch: int
    consumed: int
    seed: int
    shuffle: bool
    world_size: int
    num_rows: int
    batch_size: int
    drop_last: bool
    grad_accum: int
    balance_ranks: int
    balance_state: dict[str, float] | None
    rows_per_rank: int

    def order_digest(self, epoch: int) -> str: ...


def dataset_state(dataset: Resumable) -> dict[str, Any]:
    """The state of ``dataset`` in the process that iterates it (without a worker's block)."""
    return {
        "version": STATE_VERSION,
        "output": dataset.output,
        "epoch": dataset.epoch,
        "consumed": dataset.consumed,
        "seed": dataset.seed,
        "shuffle": dataset.shuffle,
        "world_size": dataset.world_size,
        "num_rows": dataset.num_rows,
        "batch_size": dataset.batch_size,
        "drop_last": dataset.drop_last,
        "grad_accum": dataset.grad_accum,
        "balance_ranks": dataset.balance_ranks,
        "balance": dataset.balance_state,
        "order": dataset.order_digest(dataset.epoch),
    }


def check_state(dataset: Resumable, state: dict[str, Any], info: Any) -> dict[str, Any] | None:
    """The state's worker block, once every key of ``state`` is found to fit ``dataset`` (``info``: the
    DataLoader worker this runs in, or None).

    Raises:
        PackcliError: the first key that does not, in one line starting ``cannot resume:``.
    """
    if not isinstance(state, Mapping):
        raise PackcliError(f"cannot resume: the state is a {type(state).__name__}, not the dict state_dict() returns")
    version = _integer(state.get("version"))
    if version is None:
        raise PackcliError(f"cannot resume: the state's version={state.get('version')!r} is not an integer")
    if version > STATE_VERSION:  # its keys may mean what this packcli cannot know
        raise PackcliError(
            f"cannot resume: the state is of version {version}, newer than this packcli reads ({STATE_VERSION})"
        )
    if state.get("output") != dataset.output:
        raise PackcliError(
            f"cannot resume: the state is of output {state.get('output')!r}, this dataset reads output "
            f"{dataset.output!r} (a state resumes only the output it was taken on)",
            dataset.path,
        )
    # A count of rows means the same rows at another batch size, except for a worker's count (its blocks are of
    # batch_size rows), under drop_last (the epoch's length depends on it) and with balance (the placement does).
    # A state before these keys counted rows in the main process without drop_last or balance.
    known = {"drop_last": False, "balance": None, **state}
    current = dataset_state(dataset)
    keys = ["seed", "shuffle", "world_size", "num_rows", "drop_last", "balance"]
    if state.get("worker") or dataset.drop_last or dataset.balance_state is not None:
        keys.append("batch_size")
    if dataset.balance_state is not None:
        keys += ["grad_accum", "balance_ranks"]
    for key in keys:
        if known.get(key) != current[key]:
            raise PackcliError(f"cannot resume: the state has {key}={known.get(key)!r}, this dataset {current[key]!r}")
    epoch, consumed = _integer(state.get("epoch")), _integer(state.get("consumed"))
    if epoch is None or epoch < 0:
        raise PackcliError(f"cannot resume: the state's epoch={state.get('epoch')!r} is not an integer >= 0")
    if consumed is None or not 0 <= consumed < dataset.rows_per_rank:
        raise PackcliError(
            f"cannot resume: the state's consumed={state.get('consumed')!r} is not in 0..{dataset.rows_per_rank - 1}, "
            "the rows of an epoch of this rank"
        )
    if "order" in state and state["order"] != dataset.order_digest(epoch):  # states before it had none
        raise PackcliError(
            f"cannot resume: the rows of epoch {epoch} come in another order here than where the state was "
            f"taken (numpy {np.__version__} shuffles otherwise): resuming would serve rows twice and miss others"
        )
    worker = state.get("worker")
    here = None if info is None else {"id": info.id, "num_workers": info.num_workers}
    if (worker and {"id": worker["id"], "num_workers": worker["num_workers"]}) != here:
        raise PackcliError(f"cannot resume: the state is of DataLoader worker {worker}, this is worker {here}")
    if worker:
        taken = _integer(worker.get("taken"))
        if taken is None or taken < 0:
            raise PackcliError(f"cannot resume: the worker's taken={worker.get('taken')!r} is not an int >= 0")
    return worker


def _integer(value: object) -> int | None:
    """``value`` as an int if it is an integer (a numpy one too), else None."""
    try:
        return None if isinstance(value, bool) else operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None
