"""Block-causal attention masks from ``document_ids``: a token sees the earlier tokens of its own document only.

Three forms for three kernels: boolean (SDPA: True = may attend), additive float (eager attention adds it to the
scores: 0 or the dtype's minimum), and a flex_attention ``BlockMask``. All are built by tensor comparisons on the
input's device: no loop over tokens, no host sync. A dense [B, 1, T, T] mask costs B * T^2 elements (8 x 4096:
128 MiB as bool, 512 MiB as float32), which is why batches carry ``document_ids`` and let the model build its own.
"""

from __future__ import annotations

from typing import Any

from packcli.errors import PackcliError, requires_extra

with requires_extra("torch", "packcli.torch"):
    import torch

__all__ = ["block_causal_mask", "flex_block_mask"]


def block_causal_mask(document_ids: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The [B, 1, T, T] mask of ``document_ids`` ([B, T], -1 on padding).

    Padding sees earlier padding, so no query row is empty (SDPA would give NaN there); real tokens never see
    padding.

    Args:
        dtype: None for the boolean mask (SDPA); a float dtype for the additive mask (eager attention, or SDPA
            with a float mask): 0 where attention is allowed, the dtype's minimum elsewhere.
    """
    length = document_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=document_ids.device).tril()
    allowed = ((document_ids[:, :, None] == document_ids[:, None, :]) & causal)[:, None]
    if dtype is None:
        return allowed
    additive = torch.full(allowed.shape, torch.finfo(dtype).min, dtype=dtype, device=document_ids.device)
    return additive.masked_fill_(allowed, 0.0)


def flex_block_mask(document_ids: torch.Tensor, block_size: int = 128) -> Any:
    """A flex_attention ``BlockMask`` for ``document_ids`` ([B, T]): it keeps per-tile indices, not a dense mask,
    and flex_attention skips the tiles where no pair is allowed. Needs torch >= 2.5.

    Args:
        block_size: flex_attention's tile size; 128 is its default.
    """
    try:
        with requires_extra("torch", "packcli.torch"):
            from torch.nn.attention.flex_attention import create_block_mask
    except ImportError as error:  # pragma: no cover - torch < 2.5
        raise PackcliError(f"flex_attention needs torch >= 2.5, this is torch {torch.__version__}") from error

    def same_document_causal(batch: Any, head: Any, query: Any, key: Any) -> Any:
        return (query >= key) & (document_ids[batch, query] == document_ids[batch, key])

    batch, length = document_ids.shape
    return create_block_mask(
        same_document_causal, batch, None, length, length, device=document_ids.device, BLOCK_SIZE=block_size
    )
