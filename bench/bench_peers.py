"""packcli against the preprocessing users run today (`peers.py`), on the same corpus and tokenizer: `pack` +
`export --to FORMAT` against each peer writing that format (`pack` alone against TRL's packed Arrow), each peer in
its own environment under the bench's scratch (`peer_envs.py`), skipped with the reason where it cannot run.

Each pair runs interleaved, packcli then the peer, for PACKCLI_BENCH_PEERS_ROUNDS rounds (3); the medians of wall
and CPU seconds (user + system of the process and its workers) and the peak RSS (of the largest process) are
printed, with the ratios peer / packcli. Then what each wrote is read back (`peer_tokens.py`): documents and tokens,
and how many documents one side holds that the other does not (0: the same multiset of documents).

Knobs: PACKCLI_BENCH_PEERS_SIZE (tiny; small: gcide once, the default; real: about 330 MB of text;
`peer_corpus.py`), PACKCLI_BENCH_PEERS (a comma list of peer keys; default all), PACKCLI_BENCH_PEERS_ROUNDS,
PACKCLI_BENCH_PEERS_TOKENIZER (a directory of ../shared/tokenizers; gpt2), PACKCLI_BENCH_MEGATRON_LM (a Megatron-LM
checkout, for its two scripts). Scratch: build/bench/peers (the environments and corpora stay for the next run; the
outputs are removed before each run).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
from pathlib import Path

from common import REPO, CommandFailed, python, run_measured, shared, table
from peer_corpus import build, corpus_size, describe
from peer_envs import megatron_checkout, peer_python
from peer_tokens import Documents, read
from peers import PEERS, Peer, Setup

SCRATCH = REPO / "build" / "bench" / "peers"
MAX_LEN = 4096


def main() -> None:
    name = os.environ.get("PACKCLI_BENCH_PEERS_TOKENIZER", "gpt2")
    gcide, tokenizer = shared("data/gcide.jsonl.gz"), shared(f"tokenizers/{name}/tokenizer.json")
    if not (gcide and tokenizer):
        return
    rounds = int(os.environ.get("PACKCLI_BENCH_PEERS_ROUNDS", "3"))
    wanted = os.environ.get("PACKCLI_BENCH_PEERS", ",".join(peer.key for peer in PEERS)).split(",")
    size = corpus_size()
    corpus, halves = build(gcide, SCRATCH, size)
    print(f"  {describe(corpus)}; tokenizer {name}; max_len {MAX_LEN}; {rounds} interleaved rounds")
    print(f"  load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    setup = _setup(corpus, halves, tokenizer)
    ready: list[tuple[Peer, Path]] = []
    for peer in (peer for peer in PEERS if peer.key in wanted):
        reason = _skip_reason(peer, setup)
        if isinstance(reason, str):
            print(f"  {peer.key}: skipped: {reason}")
        else:
            ready.append((peer, reason))
    figures: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    failed: dict[str, str] = {}
    for number in range(1, rounds + 1):
        for peer, bin_dir in ready:
            if peer.key in failed:
                continue
            figures.setdefault((peer.key, "packcli"), []).append(_packcli(setup, peer.export))
            try:
                figures.setdefault((peer.key, "peer"), []).append(_run_peer(peer, bin_dir, setup))
            except CommandFailed as error:
                failed[peer.key] = str(error)
                print(f"  {peer.key}: failed, left out: {error}")
                continue
            print(f"  round {number} {peer.key}: {_line(figures[peer.key, 'packcli'][-1])} packcli, "
                  f"{_line(figures[peer.key, 'peer'][-1])} peer", flush=True)  # fmt: skip
    print(f"  load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    _report([peer for peer, _ in ready if peer.key not in failed], figures, setup)


def _setup(corpus: Path, halves: Path, tokenizer: Path) -> Setup:
    """The setup, its EOS and vocabulary taken from one untimed pack (which also warms the page cache)."""
    packed = SCRATCH / "out" / "packcli"
    os.environ["PACKCLI_CACHE"] = str(SCRATCH / "packcli-cache")
    run_measured(_pack_args(corpus, tokenizer, packed))
    block = json.loads((packed / "manifest.json").read_text())["tokenizer"]
    words = json.loads(tokenizer.read_text())["added_tokens"]
    eos_text = next(word["content"] for word in words if word["id"] == block["eos_id"])
    dtype = "uint16" if block["vocab_size"] <= 65536 else "uint32"
    checkout = megatron_checkout()
    megatron = checkout if isinstance(checkout, Path) else None
    return Setup(corpus, halves, tokenizer, block["eos_id"], eos_text, MAX_LEN, dtype, megatron, SCRATCH)


def _skip_reason(peer: Peer, setup: Setup) -> Path | str:
    """The bin directory of the peer's environment, or why the peer is skipped."""
    if peer.needs_megatron and setup.megatron is None:
        reason = megatron_checkout()
        assert isinstance(reason, str)
        return reason
    found = peer_python(peer.env, SCRATCH)
    return found.parent if isinstance(found, Path) else found


def _pack_args(corpus: Path, tokenizer: Path, out: Path) -> list[str]:
    return python(
        "-m", "packcli", "pack", str(corpus), "--tokenizer", str(tokenizer), "--out", str(out), "--overwrite",
        "--quiet", "--max-len", str(MAX_LEN),
    )  # fmt: skip


def _packcli(setup: Setup, export: str | None) -> tuple[float, float, int]:
    """One timed `pack`, then `export --to EXPORT` when given: wall and CPU summed, the larger peak."""
    packed, exported = SCRATCH / "out" / "packcli", SCRATCH / "out" / f"packcli-{export}"
    shutil.rmtree(packed, ignore_errors=True)
    shutil.rmtree(exported, ignore_errors=True)
    wall, cpu, peak = run_measured(_pack_args(setup.corpus, setup.tokenizer, packed), tree=True)
    if export is None:
        return wall, cpu, peak
    args = python("-m", "packcli", "export", str(packed), "--to", export, "--out", str(exported), "--quiet")
    more = run_measured(args, tree=True)
    return wall + more[0], cpu + more[1], max(peak, more[2])


def _run_peer(peer: Peer, bin_dir: Path, setup: Setup) -> tuple[float, float, int]:
    out = SCRATCH / "out" / peer.key
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    args = peer.command(setup, out)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HF_HOME": str(out / "hf")}
    return run_measured(
        [str(bin_dir / args[0]), *args[1:]], log=SCRATCH / "out" / f"{peer.key}.log", env=env, tree=True
    )


def _line(figure: tuple[float, float, int]) -> str:
    return f"{figure[0]:.2f} s ({figure[1]:.2f} CPU s, {figure[2]} MiB)"


def _documents(peer: Peer, setup: Setup) -> tuple[Documents, Documents]:
    """What the peer wrote, and what packcli wrote in the same format, as documents."""
    out = SCRATCH / "out"
    if peer.export is None:
        ours = read("arrow", list((out / "packcli").glob("*.arrow")), setup.eos_id)
    else:
        kinds = {"megatron": ("megatron", "*.idx"), "olmo-core": ("eos", "*.npy"), "nanotron": ("ds", "*.ds")}
        kind, pattern = kinds[peer.export]
        ours = read(kind, list((out / f"packcli-{peer.export}").glob(pattern)), setup.eos_id, setup.dtype)
    theirs = read(peer.reader, peer.outputs(out / peer.key), setup.eos_id, setup.dtype)
    return theirs, ours


def _report(peers: list[Peer], figures: dict[tuple[str, str], list[tuple[float, float, int]]], setup: Setup) -> None:
    rows: list[list[object]] = []
    for peer in peers:
        theirs_docs, ours_docs = _documents(peer, setup)
        peer_runs, our_runs = figures[peer.key, "peer"], figures[peer.key, "packcli"]
        theirs = [_median(figures, peer.key, "peer", k) for k in range(2)]
        ours = [_median(figures, peer.key, "packcli", k) for k in range(2)]
        output = f"export --to {peer.export}" if peer.export else "pack"
        rows.append([
            peer.title, output, f"{theirs[0]:.2f} | {theirs[1]:.2f}", f"{ours[0]:.2f} | {ours[1]:.2f}",
            f"{theirs[0] / ours[0]:.1f}x | {theirs[1] / ours[1]:.1f}x", f"{max(r[2] for r in peer_runs)} / "
            f"{max(r[2] for r in our_runs)}", f"{theirs_docs.count:,} / {ours_docs.count:,}",
            f"{theirs_docs.tokens:,} / {ours_docs.tokens:,}", theirs_docs.differing(ours_docs),
        ])  # fmt: skip
    if not rows:
        return
    print("\n  median wall s | CPU s; peak MiB the largest of the rounds; documents and tokens peer / packcli;")
    print("  differ: documents one side holds that the other does not (0: the same multiset)")
    header = ["peer", "packcli", "peer wall | CPU", "packcli", "peer / packcli", "peak MiB", "documents", "tokens"]
    header.append("differ")
    table(header, rows)
    for peer in peers:
        faster = _median(figures, peer.key, "packcli", 0) < _median(figures, peer.key, "peer", 0)
        print(f"  target, packcli faster in wall time than {peer.key}: {'met' if faster else 'missed'}")
    if "megatron-fast" in {peer.key for peer in peers}:
        ours, theirs = (max(r[2] for r in figures["megatron-fast", side]) for side in ("packcli", "peer"))
        print(f"  target, packcli's peak at most the gigatoken script's: {'met' if ours <= theirs else 'missed'}")


def _median(figures: dict[tuple[str, str], list[tuple[float, float, int]]], key: str, side: str, k: int) -> float:
    return statistics.median(run[k] for run in figures[key, side])


if __name__ == "__main__":
    sys.exit(main())
