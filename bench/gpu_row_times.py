"""Measured GPU time of packed rows: the forward and backward pass of decoder layers shaped as Llama-3-8B's (hidden
4096, intermediate 14336, 32 heads, 8 key-value heads, SwiGLU, RMSNorm) over each row, with causal attention inside
each of the row's documents, on random activations of the row's real document lengths (the values do not change
the time; the lengths do). The row cost model (:class:`packcli.torch.RowCost`) predicts these times up to a scale;
``bench_balance.py --times`` compares the two and measures the balanced placement against the times. The output
head (projection to the vocabulary and the loss) is timed apart, for a few row lengths.

Needs CUDA and torch alone (no packcli): ``python gpu_row_times.py ROWS.json TIMES.json [LAYERS]``, ROWS.json as
``bench_balance.py --rows`` writes it."""

from __future__ import annotations

import inspect
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, VOCABULARY = 4096, 14336, 32, 8, 128256
HEAD_DIM = HIDDEN // HEADS
REPEATS = 2  # timed passes per row (the minimum is kept), after WARMUP untimed passes over the first rows
WARMUP = 3

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]


def per_document(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, longest: int) -> torch.Tensor:
    """Causal attention in each document on its own (FlashAttention through SDPA; the key-value heads repeated)."""
    k, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (k, v))
    bounds = cu.tolist()
    parts = []
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        for a, b in zip(bounds[:-1], bounds[1:]):
            one = [t[a:b].transpose(0, 1)[None] for t in (q, k, v)]
            parts.append(F.scaled_dot_product_attention(*one, is_causal=True)[0].transpose(0, 1))
    return torch.cat(parts)


def varlen() -> Attend | None:
    """PyTorch's varlen attention (one kernel over the row's documents), where this torch has it."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except Exception:  # absent before torch 2.9, or failing to import
        return None
    parameters = inspect.signature(varlen_attn).parameters
    causal = {"is_causal": True} if "is_causal" in parameters else {"window_size": (-1, 0)}
    grouped = "enable_gqa" in parameters

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, longest: int) -> torch.Tensor:
        if grouped:
            return varlen_attn(q, k, v, cu, cu, longest, longest, enable_gqa=True, **causal)
        k, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (k, v))
        return varlen_attn(q, k, v, cu, cu, longest, longest, **causal)

    return attend


class Layer(nn.Module):
    """One decoder layer (rotary embeddings left out, as the cost model leaves them out)."""

    def __init__(self, attend: Attend) -> None:
        super().__init__()
        self.attend = attend
        self.norms = nn.ModuleList([nn.RMSNorm(HIDDEN), nn.RMSNorm(HIDDEN)])
        self.qkv = nn.Linear(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM, bias=False)
        self.o = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.gate_up = nn.Linear(HIDDEN, 2 * INTERMEDIATE, bias=False)
        self.down = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor, cu: torch.Tensor, longest: int) -> torch.Tensor:
        q, k, v = self.qkv(self.norms[0](x)).split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], -1)
        shape = (len(x), -1, HEAD_DIM)
        x = x + self.o(self.attend(q.view(shape), k.view(shape), v.view(shape), cu, longest).reshape(len(x), HIDDEN))
        gate, up = self.gate_up(self.norms[1](x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


def choose_attention(device: torch.device) -> tuple[str, Attend]:
    """Varlen attention where it gives per_document's output and gradients on two documents; per_document otherwise."""
    attend = varlen()
    if attend is None:
        return "per-document SDPA (flash)", per_document
    torch.manual_seed(0)
    q, k, v = (torch.randn(300, n, HEAD_DIM, device=device, dtype=torch.bfloat16) for n in (HEADS, KV_HEADS, KV_HEADS))
    cu = torch.tensor([0, 120, 300], device=device, dtype=torch.int32)
    try:
        results = []
        for way in (attend, per_document):
            inputs = [t.clone().requires_grad_() for t in (q, k, v)]
            out = way(*inputs, cu, 180)
            out.float().square().sum().backward()
            results.append([out, *(t.grad for t in inputs)])
        for got, want in zip(*results):
            torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    except Exception as error:  # a torch whose varlen kernel is missing or differs: the loop is still exact
        print(f"varlen attention not used ({type(error).__name__}: {str(error).splitlines()[0][:200]})")
        return "per-document SDPA (flash)", per_document
    return "varlen_attn", attend


def head_times(device: torch.device, sizes: tuple[int, ...] = (8192, 16384, 32768)) -> list[list[float]]:
    """The output head's time (projection to the vocabulary and the loss, forward and backward) for rows of
    ``sizes`` tokens, best of REPEATS: a per-token cost, the same for every row of one length."""
    head = nn.Linear(HIDDEN, VOCABULARY, bias=False).to(device, torch.bfloat16)
    found = []
    for tokens in sizes:
        best = float("inf")
        for _ in range(REPEATS + 1):  # the first pass warms up
            x = torch.randn(tokens, HIDDEN, device=device, dtype=torch.bfloat16, requires_grad=True)
            targets = torch.randint(0, VOCABULARY, (tokens,), device=device)
            head.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            F.cross_entropy(head(x).float(), targets).backward()
            end.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(end) / 1000)
        found.append([tokens, best])
    return found


def main() -> None:
    rows_path, times_path = sys.argv[1], sys.argv[2]
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    rows: list[list[int]] = json.loads(Path(rows_path).read_text())["rows"]
    device = torch.device("cuda")
    name, attend = choose_attention(device)
    model = nn.ModuleList([Layer(attend) for _ in range(layers)]).to(device, torch.bfloat16)

    def step(lengths: list[int]) -> float:
        tokens = sum(lengths)
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=device, dtype=torch.int32)
        x = torch.randn(tokens, HIDDEN, device=device, dtype=torch.bfloat16, requires_grad=True)
        grad = torch.randn(tokens, HIDDEN, device=device, dtype=torch.bfloat16)
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        h = x
        for layer in model:
            h = layer(h, cu, max(lengths))
        h.backward(grad)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1000

    for lengths in rows[:WARMUP]:
        step(lengths)
    began = time.perf_counter()
    seconds = [min(step(lengths) for _ in range(REPEATS)) for lengths in rows]
    record = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "attention": name,
        "layers": layers,
        "repeats": REPEATS,
        "tokens": sum(map(sum, rows)),
        "seconds": seconds,
        "head": head_times(device),
    }
    Path(times_path).write_text(json.dumps(record))
    print(
        f"{len(rows)} rows on {record['device']} with {name}, {layers} layer(s): {sum(seconds):.2f} s of passes, "
        f"{time.perf_counter() - began:.0f} s in all"
    )


if __name__ == "__main__":
    main()
