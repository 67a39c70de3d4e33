"""The loader's public API: packed shards -> training batches, varlen (FlashAttention) or padded layout, split
across data-parallel ranks and DataLoader workers, resumable, optionally with balanced steps. Needs torch.

The parts live in :mod:`packcli.loader`: the dataset and its epochs (``dataset``), the order of a rank's rows and
the balanced placement (``order``, ``balance``), states (``state``), batches on a device (``batches``), collate
functions (``collate``) and attention masks (``masks``). docs/loader.md shows them at work.
"""

from __future__ import annotations

from packcli.loader.balance import RowCost
from packcli.loader.batches import PackedLoader, loader
from packcli.loader.collate import collate_padded, collate_varlen, flash_attention_kwargs
from packcli.loader.dataset import PackedDataset
from packcli.loader.masks import block_causal_mask, flex_block_mask

__all__ = [
    "PackedDataset",
    "PackedLoader",
    "RowCost",
    "block_causal_mask",
    "collate_padded",
    "collate_varlen",
    "flash_attention_kwargs",
    "flex_block_mask",
    "loader",
]
