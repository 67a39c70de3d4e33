"""Strategies: invariants under hypothesis, equality with tiny textbook references, the published golden example."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from conftest import REPO, error_line, write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

import packcli.strategies as registry
from packcli.cli import app
from packcli.errors import PackcliError, UsageError
from packcli.format.shards import read_shard
from packcli.strategies import (
    Packing,
    available_strategies,
    check_packing,
    get_strategy,
    register_strategy,
    run_strategy,
)


@pytest.fixture
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the registry for one test: its registrations end with it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def pack_ids_with(strategy: str, records: list[list[int]], tmp_path: Path, *extra: str) -> tuple[Result, Path]:
    """``packcli pack`` of pre-tokenized ``records`` with ``--strategy strategy --max-len 4``: its result and --out."""
    corpus = write_jsonl(tmp_path / "ids.jsonl", [{"ids": ids} for ids in records])
    out = tmp_path / "out"
    args = ["pack", str(corpus), "--ids-field", "ids", "--max-len", "4", "--strategy", strategy, "--out", str(out)]
    return CliRunner().invoke(app, [*args, *extra]), out


def shard_rows(out: Path) -> list[list[int]]:
    """The input_ids of every row of the output's shards, in order."""
    return [row for path in sorted(out.glob("shard-*.arrow")) for row in read_shard(path)["input_ids"].to_pylist()]


def rows_of(packing: Packing) -> list[list[int]]:
    return [packing.order[packing.offsets[k] : packing.offsets[k + 1]].tolist() for k in range(len(packing))]


def reference_fit(lengths: list[int], max_len: int, best: bool) -> list[list[int]]:
    """Textbook BFD/FFD in O(n x rows): longest first (stable), ties to the lowest-numbered sequence."""
    rooms: list[int] = []
    rows: list[list[int]] = []
    for doc in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        fits = [k for k, room in enumerate(rooms) if room >= lengths[doc]]
        if not fits:
            rooms.append(max_len)
            rows.append([])
            fits = [len(rooms) - 1]
        pick = min(fits, key=lambda k: (rooms[k], k)) if best else fits[0]
        rooms[pick] -= lengths[doc]
        rows[pick].append(doc)
    return rows


@st.composite
def length_arrays(draw: st.DrawFn, max_max_len: int = 64) -> tuple[np.ndarray, int]:
    max_len = draw(st.integers(1, max_max_len))
    lengths = draw(st.lists(st.integers(1, max_len), max_size=120))
    return np.array(lengths, dtype=np.int64), max_len


@pytest.mark.parametrize("name", ["bfd", "ffd", "greedy"])
@given(case=length_arrays())
@settings(max_examples=150, deadline=None)
def test_every_strategy_keeps_the_invariants(name: str, case: tuple[np.ndarray, int]) -> None:
    lengths, max_len = case
    packing = get_strategy(name)(lengths, max_len)
    check_packing(packing, lengths, max_len, name)
    assert sorted(packing.order.tolist()) == list(range(len(lengths)))
    fill = [int(lengths[row].sum()) for row in rows_of(packing)]
    assert all(f <= max_len for f in fill)
    assert len(packing) >= -(-int(lengths.sum()) // max_len)
    again = get_strategy(name)(lengths.copy(), max_len)
    assert np.array_equal(packing.order, again.order) and np.array_equal(packing.offsets, again.offsets)
    if name == "greedy":
        assert packing.order.tolist() == list(range(len(lengths)))
    else:  # a fit-decreasing packing never leaves two sequences both at most half full
        assert sum(2 * f <= max_len for f in fill) <= 1


@pytest.mark.parametrize("name,best", [("bfd", True), ("ffd", False)])
@given(case=length_arrays())
@settings(max_examples=300, deadline=None)
def test_fit_decreasing_equals_the_textbook_reference(name: str, best: bool, case: tuple[np.ndarray, int]) -> None:
    lengths, max_len = case
    assert rows_of(get_strategy(name)(lengths, max_len)) == reference_fit(lengths.tolist(), max_len, best)


@pytest.mark.parametrize("name,best", [("bfd", True), ("ffd", False)])
def test_fit_decreasing_on_larger_random_inputs(name: str, best: bool) -> None:
    rng = np.random.default_rng(7)
    for max_len in (16, 100, 1000):
        lengths = np.clip(rng.lognormal(np.log(max_len / 8), 1.0, size=800).round(), 1, max_len).astype(np.int64)
        assert rows_of(get_strategy(name)(lengths, max_len)) == reference_fit(lengths.tolist(), max_len, best)


def test_golden_example_of_best_fit_packing_paper() -> None:
    # arXiv 2404.10830, Appendix B: capacity 8, documents of 8, 6, 6, 4, 3 tokens -> [8] [6] [6] [4 3];
    # extended with 2 and 3: the 2 joins the first 6 (least room that fits, lowest index), the 3 opens a new one.
    lengths = np.array([8, 6, 6, 4, 3, 2, 3])
    assert rows_of(get_strategy("bfd")(lengths[:5], 8)) == [[0], [1], [2], [3, 4]]
    assert rows_of(get_strategy("bfd")(lengths, 8)) == [[0], [1, 5], [2], [3, 4], [6]]


def test_greedy_next_fit_in_order() -> None:
    assert rows_of(get_strategy("greedy")(np.array([3, 2, 4, 1, 1, 5]), 5)) == [[0, 1], [2, 3], [4], [5]]


def test_unknown_strategy_lists_the_available_ones() -> None:
    with pytest.raises(UsageError, match="available: bfd, ffd, greedy"):
        get_strategy("nope")


def test_registered_strategy_is_listed_checked_and_windowed(own_registry: None) -> None:
    def one_per_row(lengths: np.ndarray, max_len: int) -> Packing:
        """One document per sequence (for tests)."""
        return Packing(np.arange(len(lengths)), np.arange(len(lengths) + 1))

    register_strategy("one-per-row", one_per_row)
    assert available_strategies()["one-per-row"] == "One document per sequence (for tests)."
    packing = run_strategy("one-per-row", np.array([1, 2, 3]), 3, window=2)
    assert rows_of(packing) == [[0], [1], [2]]

    def broken(lengths: np.ndarray, max_len: int) -> Packing:
        """Puts everything in one sequence."""
        return Packing(np.arange(len(lengths)), np.array([0, len(lengths)]))

    register_strategy("broken", broken)
    with pytest.raises(PackcliError, match="'broken' is invalid: sequence 0 holds 6 tokens > max_len 3"):
        run_strategy("broken", np.array([1, 2, 3]), 3)
    with pytest.raises(UsageError, match="built in"):
        register_strategy("bfd", broken)


@given(case=length_arrays(), window=st.integers(1, 50))
@settings(max_examples=100, deadline=None)
def test_windows_pack_each_window_on_its_own(case: tuple[np.ndarray, int], window: int) -> None:
    lengths, max_len = case
    packing = run_strategy("bfd", lengths, max_len, window=window)
    for row in rows_of(packing):  # no sequence mixes windows
        assert len({doc // window for doc in row}) == 1
    expected = sum(len(get_strategy("bfd")(lengths[i : i + window], max_len)) for i in range(0, len(lengths), window))
    assert len(packing) == expected


def test_check_packing_rejects_a_lost_document() -> None:
    with pytest.raises(PackcliError, match="not a permutation"):
        check_packing(Packing(np.array([0]), np.array([0, 1])), np.array([1, 1]), 4)


def install_plugin(directory: Path, monkeypatch: pytest.MonkeyPatch, name: str, entry_point: str) -> None:
    """A distribution ``name`` on sys.path declaring ``entry_point`` in the packcli.strategies group, with the
    registry reset to the built-in strategies (for this test only)."""
    info = directory / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[packcli.strategies]\n{entry_point}\n")
    monkeypatch.syspath_prepend(str(directory))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)


def test_entry_point_strategies_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package that declares a strategy in the packcli.strategies entry-point group, installed on sys.path."""

    (tmp_path / "my_packer.py").write_text(
        "import numpy as np\n"
        "from packcli.strategies import Packing\n"
        "def reverse(lengths, max_len):\n"
        '    """One document per sequence, last first."""\n'
        "    n = len(lengths)\n"
        "    return Packing(np.arange(n)[::-1].copy(), np.arange(n + 1))\n"
    )
    install_plugin(tmp_path, monkeypatch, "my-packer", "reverse = my_packer:reverse")
    assert available_strategies()["reverse"] == "One document per sequence, last first."
    assert rows_of(run_strategy("reverse", np.array([1, 2, 3]), 3)) == [[2], [1], [0]]


@st.composite
def out_of_range(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """Lengths with at least one value outside 1..max_len: 0, negative, or longer than max_len."""
    max_len = draw(st.integers(1, 64))
    good = draw(st.lists(st.integers(1, max_len), max_size=40))
    bad = draw(st.lists(st.one_of(st.integers(-3, 0), st.integers(max_len + 1, 4 * max_len + 8)), min_size=1))
    lengths = draw(st.permutations([*good, *bad]))
    return np.array(lengths, dtype=np.int64), max_len


@pytest.mark.parametrize("name", ["bfd", "ffd", "greedy"])
@given(case=out_of_range())
@settings(max_examples=60, deadline=None)
def test_lengths_outside_one_to_max_len_are_a_usage_error_never_a_hang(name: str, case: tuple[np.ndarray, int]) -> None:
    lengths, max_len = case
    with pytest.raises(UsageError, match=r"a strategy packs lengths in 1\.\.max_len"):
        get_strategy(name)(lengths, max_len)
    with pytest.raises(UsageError, match=r"lengths\[\d+\] is -?\d+"):
        run_strategy(name, lengths, max_len)


def test_run_strategy_checks_lengths_before_any_strategy_runs(own_registry: None) -> None:
    calls: list[int] = []

    def counting(lengths: np.ndarray, max_len: int) -> Packing:
        """Records that it ran."""
        calls.append(len(lengths))
        return Packing(order=np.arange(len(lengths)), offsets=np.arange(len(lengths) + 1))

    register_strategy("counting", counting)
    for lengths, max_len in (([3, 0, 2], 4), ([3, 5, 2], 4), ([[1, 2]], 4), ([1.5], 4), ([1], 0)):
        with pytest.raises(UsageError):
            run_strategy("counting", np.array(lengths), max_len)
    assert calls == []
    run_strategy("counting", np.array([], dtype=np.int64), 4)
    assert calls == [0]


@st.composite
def long_context(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """Long-context max_len values (up to the int32 limit) with short and long documents."""
    max_len = draw(st.sampled_from([2**16, 2**20 + 7, 2**31 - 1]))
    lengths = draw(st.lists(st.one_of(st.integers(1, 40), st.integers(1, max_len)), max_size=60))
    return np.array(lengths, dtype=np.int64), max_len


@pytest.mark.parametrize("name,best", [("bfd", True), ("ffd", False)])
@given(case=long_context())
@settings(max_examples=80, deadline=None)
def test_fit_decreasing_at_long_context_lengths(name: str, best: bool, case: tuple[np.ndarray, int]) -> None:
    """The engine's work follows the lengths present, not max_len: 2**31 - 1 is as quick as 64 (it was O(max_len))."""
    lengths, max_len = case
    assert rows_of(get_strategy(name)(lengths, max_len)) == reference_fit(lengths.tolist(), max_len, best)


@pytest.mark.parametrize("first_fit", [False, True])
def test_the_worked_trace_in_the_engine_docstring(first_fit: bool) -> None:
    from packcli.strategies._fit import fit_decreasing, place

    events, groups, sequences = place([3, 1], [2, 3], 4, first_fit)
    assert events == [(0, 2, 1, 0), (0, 2, 1, 1), (2, 1, 1, 0)] and sequences == 3
    assert groups.all_groups().tolist() == [[0, 2, 2], [2, 1, 1]]
    packing = fit_decreasing(np.array([3, 3, 1, 1, 1]), 4, first_fit)
    assert packing.order.tolist() == [0, 2, 1, 3, 4] and packing.offsets.tolist() == [0, 2, 4, 5]


def test_a_built_in_strategy_needs_no_entry_point_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken third-party entry point fails only the names that are not built in (and the listing)."""
    install_plugin(tmp_path, monkeypatch, "broken-packer", "broken = no_such_module:pack")
    assert rows_of(run_strategy("bfd", np.array([1, 2, 3]), 3)) == [[2], [1, 0]]
    assert not registry._entry_points_loaded
    with pytest.raises(PackcliError, match="cannot load strategy 'broken'"):
        get_strategy("anything-else")


def _bench_baselines() -> ModuleType:
    """bench/baselines.py, the plain-Python BFD that ``bench/bench_strategies.py`` times bfd against."""
    spec = importlib.util.spec_from_file_location("baselines", REPO / "bench" / "baselines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@given(case=length_arrays())
@settings(max_examples=200, deadline=None)
def test_the_benchmark_baseline_packs_exactly_as_bfd(case: tuple[np.ndarray, int]) -> None:
    """The benchmark's speed-up is over the same packing, computed in fair plain Python (buckets by room)."""
    lengths, max_len = case
    assert _bench_baselines().room_bfd(lengths, max_len) == rows_of(get_strategy("bfd")(lengths, max_len))


def test_the_benchmark_baseline_on_larger_random_inputs() -> None:
    rng = np.random.default_rng(11)
    room_bfd = _bench_baselines().room_bfd
    for max_len in (1, 7, 100, 4096):
        lengths = np.clip(rng.lognormal(np.log(max_len / 8 + 1), 1.0, size=3000).round(), 1, max_len).astype(np.int64)
        assert room_bfd(lengths, max_len) == rows_of(get_strategy("bfd")(lengths, max_len))


def _bad_packings() -> dict[str, object]:
    """What a hostile or buggy strategy may return for three documents, each refused before anything is written."""
    three = np.arange(3)
    return {
        "a list": [[0], [1], [2]],
        "None": None,
        "float order": Packing(three + 0.0, np.arange(4)),
        "float offsets": Packing(three, np.arange(4) + 0.0),
        "a document twice": Packing(np.array([0, 1, 1]), np.arange(4)),
        "one missing": Packing(np.array([0, 1]), np.arange(3)),
        "a sequence over max_len": Packing(three, np.array([0, 3])),
    }


@pytest.mark.parametrize("window", [[], ["--window", "2"]])
@pytest.mark.parametrize("what", list(_bad_packings()))
def test_a_bad_custom_packing_is_refused_in_one_line_and_never_written(
    what: str, window: list[str], tmp_path: Path, own_registry: None
) -> None:
    bad = _bad_packings()[what]
    register_strategy("hostile", lambda lengths, max_len: bad)  # type: ignore[arg-type, return-value]
    result, out = pack_ids_with("hostile", [[1, 2], [3], [4, 5, 6]], tmp_path, *window, "--quiet")
    assert result.exit_code == 1, result.output
    assert error_line(result.stderr).startswith("error: packing from 'hostile' is invalid: ")
    assert "unexpected" not in result.stderr
    assert not out.exists()


def test_a_custom_strategy_that_raises_is_named(own_registry: None) -> None:
    def fails(lengths: np.ndarray, max_len: int) -> Packing:
        raise ValueError("boom")

    register_strategy("fails", fails)
    with pytest.raises(PackcliError, match=r"^strategy 'fails' failed: ValueError: boom$"):
        run_strategy("fails", np.array([1, 2]), 4)


def optimum(lengths: list[int], max_len: int) -> int:
    """The fewest sequences that hold ``lengths``, by exhaustive search (tiny inputs only): try k sequences from the
    lower bound up, placing documents longest first, never into a second empty sequence (they are alike)."""
    items = sorted(lengths, reverse=True)

    def fits(rooms: list[int], at: int) -> bool:
        if at == len(items):
            return True
        tried = set()
        for k, room in enumerate(rooms):
            if room >= items[at] and room not in tried:
                tried.add(room)  # sequences with equal room are alike
                rooms[k] -= items[at]
                if fits(rooms, at + 1):
                    return True
                rooms[k] += items[at]
        return False

    k = -(-sum(items) // max_len)
    while not fits([max_len] * k, 0):
        k += 1
    return k


@pytest.mark.parametrize("name", ["bfd", "ffd"])
@given(max_len=st.integers(1, 20), data=st.data())
@settings(max_examples=150, deadline=None)
def test_fit_decreasing_against_the_brute_force_optimum(name: str, max_len: int, data: st.DataObject) -> None:
    """Never fewer sequences than the optimum (a count below it would be an invalid packing), and within the tight
    absolute bound of first- and best-fit decreasing, 11/9 OPT + 6/9 (Dosa 2007); one sequence when one suffices."""
    lengths = data.draw(st.lists(st.integers(1, max_len), min_size=1, max_size=9))
    best = optimum(lengths, max_len)
    used = len(run_strategy(name, np.array(lengths), max_len))
    assert best <= used <= (11 * best + 6) // 9
    if best == 1:
        assert used == 1


def test_a_custom_strategy_cannot_change_the_lengths_it_packs(tmp_path: Path, own_registry: None) -> None:
    """A strategy that sorts or overwrites its lengths in place once made the writer gather the wrong tokens: exit
    0, 3,026 of 3,057 tokens gone. The strategy now gets a read-only view, so it fails, named, and nothing is written."""

    def shrink(lengths: np.ndarray, max_len: int) -> Packing:
        lengths[:] = 1
        return Packing(np.arange(len(lengths)), np.array([0, len(lengths)]))

    register_strategy("shrink", shrink)
    result, out = pack_ids_with("shrink", [[1, 2, 3], [4, 5, 6]], tmp_path)
    assert result.exit_code == 1, result.output
    assert (
        error_line(result.stderr).startswith("error: strategy 'shrink' failed: ValueError: ")
        and "read-only" in result.stderr
    )
    assert not out.exists()


def test_a_strategy_that_is_not_a_function_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry point naming a string, or a registration of a number, once ended in 'unexpected TypeError'."""
    with pytest.raises(UsageError, match="strategy 'five' is not callable: got int"):
        register_strategy("five", 5)  # type: ignore[arg-type]
    (tmp_path / "not_a_packer.py").write_text("NAME = 'not a function'\n")
    install_plugin(tmp_path, monkeypatch, "not-a-packer", "word = not_a_packer:NAME")
    with pytest.raises(
        PackcliError, match=r"strategy 'word' from entry point not_a_packer:NAME is not callable: got str"
    ):
        run_strategy("word", np.array([1, 2]), 4)


def test_a_custom_strategy_that_makes_its_view_writable_still_cannot_change_the_lengths(
    tmp_path: Path, own_registry: None
) -> None:
    """A view of a writable array can be made writable again (``flags.writeable = True``): the strategy is handed
    lengths of its own, so what it writes never reaches those the writer gathers by. Every token is written."""

    def unlock(lengths: np.ndarray, max_len: int) -> Packing:
        lengths.flags.writeable = True
        lengths[:] = 1
        return Packing(np.arange(len(lengths)), np.arange(len(lengths) + 1))

    register_strategy("unlock", unlock)
    result, out = pack_ids_with("unlock", [[1, 2, 3], [4, 5, 6]], tmp_path)
    assert result.exit_code == 0, result.output
    assert CliRunner().invoke(app, ["verify", str(out)]).exit_code == 0
    rows = shard_rows(out)
    assert sorted(rows) == [[1, 2, 3], [4, 5, 6]], rows  # no EOS in pre-tokenized ids: every token, whole
