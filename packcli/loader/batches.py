"""Batches on a device: :func:`loader` builds a DataLoader over a :class:`PackedDataset` with the collate function
of a layout, and :class:`PackedLoader` counts the rows its workers deliver, so epochs and states stay exact."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from packcli.errors import requires_extra

with requires_extra("torch", "packcli.torch"):
    import torch
    from torch.utils.data import DataLoader, get_worker_info

from packcli.loader.balance import RowCost
from packcli.loader.collate import check_cp_options, collate_padded, collate_varlen
from packcli.loader.dataset import PackedDataset

__all__ = ["PackedLoader", "loader"]

COLLATE_OPTIONS = {"varlen": ("pad_to_multiple_of", "cu_seqlens_length"), "padded": ()}  # what loader() passes on


def _track_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn`` of :func:`loader`: the main process counts what this worker delivers."""
    info = get_worker_info()
    assert info is not None and isinstance(info.dataset, PackedDataset)
    info.dataset._tracked = True


class PackedLoader:
    """A DataLoader over a :class:`PackedDataset` that moves batches to ``device`` and counts delivered rows, so
    the epoch and ``state_dict`` are exact with workers too."""

    def __init__(self, dataset: PackedDataset, data_loader: DataLoader[Any], device: torch.device) -> None:
        self.dataset = dataset
        self.data_loader = data_loader
        self.device = device

    def __len__(self) -> int:
        return len(self.data_loader)

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self.dataset.epoch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        non_blocking = self.device.type == "cuda"
        for batch in self.data_loader:
            if self.data_loader.num_workers:  # in-process iteration counts itself; workers cannot tell us
                self.dataset.advance(len(batch["row_index"]))
            yield {
                key: value.to(self.device, non_blocking=non_blocking) if isinstance(value, torch.Tensor) else value
                for key, value in batch.items()
            }

    def set_epoch(self, epoch: int) -> None:
        """See :meth:`PackedDataset.set_epoch`."""
        self.dataset.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """See :meth:`PackedDataset.state_dict`: the rows delivered so far, counted here."""
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """See :meth:`PackedDataset.load_state_dict`."""
        self.dataset.load_state_dict(state)


def loader(
    path: str | Path,
    batch_size: int,
    device: str | torch.device = "cpu",
    num_workers: int = 0,
    layout: str = "varlen",
    shuffle: bool = True,
    seed: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    cache_dir: str | Path | None = None,
    cache_limit: int | None = None,
    cp_size: int = 1,
    cp_rank: int = 0,
    drop_last: bool = False,
    grad_accum: int | None = None,
    balance: RowCost | None = None,
    sources: bool = False,
    **collate_options: Any,
) -> PackedLoader:
    """Batches of ``batch_size`` rows from a packed output on ``device``: pinned host memory and non-blocking
    copies when the device is a GPU.

    Args:
        layout: "varlen" (:func:`collate_varlen`) or "padded" (:func:`collate_padded`, to max_len).
        cache_dir, cache_limit: for an output URL, where its shards are fetched and the bytes that directory may
            hold (see :class:`PackedDataset`).
        rank, world_size: the data-parallel rank and size (with context parallelism, not the global rank: every
            rank of a context-parallel group reads the same rows).
        cp_size, cp_rank: context parallelism (varlen only): each batch is this rank's share of the sequence.
        drop_last: every batch full: each rank's epoch ends at its last full batch (see :class:`PackedDataset`).
        grad_accum, balance: balanced steps and ``num_items_in_batch`` (see :class:`PackedDataset`).
        sources: each batch also carries ``sources``, a list with each document's source
            (``{"input", "record", "piece", "pieces"}``) in batch order (see :class:`PackedDataset`); off by default.
        collate_options: passed to the varlen collate function (``pad_to_multiple_of``, ``cu_seqlens_length``).

    Raises:
        ValueError: an argument out of its range, an unknown layout, context parallelism without an explicit
            data-parallel rank, or a CUDA device torch cannot reach.
        TypeError: an option the layout's collate function does not take.
    """
    if layout not in COLLATE_OPTIONS:
        raise ValueError(f"unknown layout {layout!r}; use 'varlen' or 'padded'")
    for option in collate_options:
        if option not in COLLATE_OPTIONS[layout]:
            raise TypeError(
                f"loader() got an unknown option {option!r} for layout={layout!r}; its options are: "
                + (", ".join(COLLATE_OPTIONS[layout]) or "none")
            )
    if check_cp_options(cp_size, cp_rank, collate_options.get("pad_to_multiple_of")) and (
        rank is None or world_size is None
    ):
        raise ValueError(
            "with cp_size > 1 pass rank= and world_size= as the data-parallel rank and size: the ranks of one "
            "context-parallel group must read the same rows, which torch.distributed's global rank would not give"
        )
    if cp_size != 1 and layout != "varlen":
        raise ValueError(f"context parallelism (cp_size={cp_size}) needs layout='varlen', not {layout!r}")
    target = torch.device(device)  # every argument is checked before the output is opened (or fetched)
    if target.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r}: torch sees no CUDA device (torch.cuda.is_available() is False: a CPU build of torch, "
            "or no GPU visible to this process); pass device='cpu' or install torch with CUDA"
        )
    dataset = PackedDataset(
        path,
        shuffle=shuffle,
        seed=seed,
        rank=rank,
        world_size=world_size,
        batch_size=batch_size,
        cache_dir=cache_dir,
        cache_limit=cache_limit,
        drop_last=drop_last,
        grad_accum=grad_accum,
        balance=balance,
        sources=sources,
    )
    if layout == "varlen":
        collate = partial(collate_varlen, pad_id=dataset.pad_id, cp_size=cp_size, cp_rank=cp_rank, **collate_options)
    else:
        collate = partial(collate_padded, max_len=dataset.max_len, pad_id=dataset.pad_id, **collate_options)
    data_loader = DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=num_workers,
        collate_fn=collate,
        pin_memory=target.type == "cuda",
        worker_init_fn=_track_worker if num_workers else None,
        persistent_workers=False,
    )
    return PackedLoader(dataset, data_loader, target)
