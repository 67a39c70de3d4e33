"""Publishing through the real CLI on real files: what --overwrite may replace, a symlinked --out, concurrent runs
under the lock, and signals mid-run that leave nothing behind."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SAMPLE, error_line, read_jsonl, write_jsonl
from typer.testing import CliRunner

from packcli.cli import app
from packcli.util.locks import FileLock

runner = CliRunner()


@pytest.fixture(scope="module")
def records() -> list[dict[str, str]]:
    return read_jsonl(SAMPLE)[:40]


@pytest.fixture
def corpus(tmp_path: Path, records: list[dict[str, str]]) -> Path:
    return write_jsonl(tmp_path / "corpus.jsonl", records)


def pack(corpus: Path, out: Path, *extra: str) -> tuple[int, str]:
    result = runner.invoke(app, ["pack", str(corpus), "--out", str(out), "--quiet", *extra])
    return result.exit_code, result.stderr


def verified(out: Path) -> bool:
    return runner.invoke(app, ["verify", str(out)]).exit_code == 0


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` (links not followed) with its sha256."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def debris(parent: Path) -> list[str]:
    return sorted(path.name for path in parent.iterdir() if ".packcli-" in path.name)


# --- what --overwrite may replace -------------------------------------------------------------------------------


def test_overwrite_never_replaces_a_directory_holding_inputs(tmp_path: Path, records: list[dict[str, str]]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    corpus = write_jsonl(data / "corpus.jsonl", records)
    before = snapshot(data)
    code, stderr = pack(data, data, "--overwrite")
    assert code == 1 and "lies inside the output directory" in stderr and "never writes over its inputs" in stderr
    code, stderr = pack(corpus, data, "--overwrite")
    assert code == 1 and "lies inside the output directory" in stderr
    code, stderr = pack(data, data / "packed", "--overwrite")
    assert code == 1 and "lies inside the input directory" in stderr
    assert snapshot(data) == before and sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_overwrite_never_replaces_a_foreign_directory(tmp_path: Path, corpus: Path) -> None:
    thesis = tmp_path / "thesis"
    (thesis / "chapters").mkdir(parents=True)
    (thesis / "notes.txt").write_text("precious")
    (thesis / "chapters" / "one.tex").write_text("also precious")
    for extra in ([], ["--overwrite"]):
        code, stderr = pack(corpus, thesis, *extra)
        assert code == 1 and "not a packcli output" in stderr and "'chapters'" in stderr
    assert snapshot(thesis) == {"notes.txt": hashlib.sha256(b"precious").hexdigest()} | {
        "chapters/one.tex": hashlib.sha256(b"also precious").hexdigest()
    }


def test_an_empty_directory_is_used_without_overwrite(tmp_path: Path, corpus: Path) -> None:
    (tmp_path / "out").mkdir()
    assert pack(corpus, tmp_path / "out") == (0, "")
    assert verified(tmp_path / "out") and debris(tmp_path) == []


def test_overwrite_replaces_an_output_but_not_files_put_beside_its_shards(tmp_path: Path, corpus: Path) -> None:
    out = tmp_path / "out"
    assert pack(corpus, out, "--max-len", "256")[0] == 0
    code, stderr = pack(corpus, out, "--max-len", "128")
    assert code == 1 and "--overwrite" in stderr
    (out / "shard-00000.arrow.tmp").write_bytes(b"left by an interrupted write")  # packcli's own debris
    assert pack(corpus, out, "--max-len", "128", "--overwrite")[0] == 0
    assert verified(out) and '"max_len": 128' in (out / "manifest.json").read_text()
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    code, stderr = pack(corpus, out, "--max-len", "64", "--overwrite")
    assert code == 1 and "'notes.txt'" in stderr
    assert snapshot(out) == before and debris(tmp_path) == []


def test_a_damaged_output_is_not_replaced(tmp_path: Path, corpus: Path) -> None:
    out = tmp_path / "out"
    assert pack(corpus, out)[0] == 0
    (out / "manifest.json").write_text("{broken")
    code, stderr = pack(corpus, out, "--overwrite")
    assert code == 1 and "its manifest is unusable" in stderr and "remove it yourself" in stderr


# --- a symlinked --out ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_symlinked_out_is_written_through(tmp_path: Path, corpus: Path, target_exists: bool) -> None:
    scratch, work = tmp_path / "scratch", tmp_path / "work"
    work.mkdir()
    (scratch / "packed").mkdir(parents=True) if target_exists else scratch.mkdir()
    link = work / "packed"
    link.symlink_to(scratch / "packed")
    for max_len in ("256", "128"):
        assert pack(corpus, link, "--max-len", max_len, "--overwrite") == (0, "")
        assert link.is_symlink() and os.readlink(link) == str(scratch / "packed")
        assert f'"max_len": {max_len}' in (scratch / "packed" / "manifest.json").read_text()
        assert verified(link)
        assert [p.name for p in work.iterdir()] == ["packed"] and [p.name for p in scratch.iterdir()] == ["packed"]


@pytest.mark.parametrize("dry_run", [False, True])
def test_an_out_in_a_symlink_loop_is_refused_naming_it(tmp_path: Path, corpus: Path, dry_run: bool) -> None:
    """A link loop (a -> b -> a), as --out or above it, is a one-line error naming --out, not 'unexpected'."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for out in (tmp_path / "a", tmp_path / "a" / "packed"):
        code, stderr = pack(corpus, out, *(["--dry-run"] if dry_run else []))
        assert code == 1 and error_line(stderr) == f"error: {out}: a loop of symbolic links; choose another --out"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "corpus.jsonl"]


# --- one writer at a time ---------------------------------------------------------------------------------------


def test_a_held_lock_refuses_naming_the_pid(tmp_path: Path, corpus: Path) -> None:
    lock = FileLock(tmp_path / ".out.packcli-lock")
    assert lock.acquire(wait=False)
    try:
        code, stderr = pack(corpus, tmp_path / "out")
        assert code == 1 and f"in use by pid {os.getpid()}" in stderr
        assert not (tmp_path / "out").exists()
    finally:
        lock.release(remove=True)
    assert pack(corpus, tmp_path / "out")[0] == 0 and debris(tmp_path) == []


def test_the_lock_is_free_once_its_holder_dies(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import time; from packcli.util.locks import FileLock; FileLock({str(path)!r}).acquire(); time.sleep(600)",
        ]
    )
    try:
        for _ in range(600):
            if FileLock(path).holder() == holder.pid:
                break
            time.sleep(0.05)
        first = FileLock(path)
        assert not first.acquire(wait=False) and first.holder() == holder.pid
    finally:
        holder.kill()
        holder.wait()
    second = FileLock(path)
    assert second.acquire(wait=False) and second.holder() == os.getpid()
    second.release(remove=True)
    assert not path.exists()


def packcli(*args: str) -> subprocess.Popen[str]:
    """``packcli`` in a subprocess, with SIGINT and SIGTERM at their defaults whatever this process ignores."""

    def default_signals() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return subprocess.Popen(
        [sys.executable, "-m", "packcli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )


@pytest.mark.parametrize("gap", [0.0, 0.3, 1.0, None])  # None: the second starts once the first has finished
def test_concurrent_runs_leave_a_verified_output(tmp_path: Path, corpus: Path, gap: float | None) -> None:
    out = tmp_path / "out"
    first = packcli("pack", str(corpus), "--out", str(out), "--max-len", "256", "--overwrite", "--quiet")
    if gap is None:
        first.wait()
    else:
        time.sleep(gap)
    second = packcli("pack", str(corpus), "--out", str(out), "--max-len", "512", "--overwrite", "--quiet")
    results = [(run.wait(), run.communicate()[1]) for run in (first, second)]
    for code, stderr in results:
        assert code in (0, 1), stderr
        assert "[Errno" not in stderr and "unexpected" not in stderr and "Traceback" not in stderr, stderr
        if code == 1:
            assert f"in use by pid {first.pid}" in stderr or f"in use by pid {second.pid}" in stderr, stderr
    assert any(code == 0 for code, _ in results)
    if gap is None:
        assert [code for code, _ in results] == [0, 0]
    assert verified(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "out"]


# --- signals and dead runs --------------------------------------------------------------------------------------


@pytest.fixture
def long_corpus(tmp_path: Path) -> list[str]:
    """Enough text that tokenizing it takes seconds: four copies of the sample, as four files."""
    copies = []
    for k in range(4):
        (tmp_path / f"copy{k}.jsonl.gz").write_bytes(SAMPLE.read_bytes())
        copies.append(str(tmp_path / f"copy{k}.jsonl.gz"))
    return copies


def start_and_wait_for_staging(inputs: list[str], out: Path) -> subprocess.Popen[str]:
    run = packcli("pack", *inputs, "--out", str(out), "--overwrite", "--quiet")
    for _ in range(1200):
        if list(out.parent.glob(f".{out.name}.packcli-staging-*")) or run.poll() is not None:
            break
        time.sleep(0.05)
    assert run.poll() is None, run.communicate()
    return run


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_run_removes_the_staging_and_keeps_the_old_output(
    tmp_path: Path, corpus: Path, long_corpus: list[str], signum: signal.Signals
) -> None:
    out = tmp_path / "out"
    assert pack(corpus, out)[0] == 0
    before = snapshot(out)
    run = start_and_wait_for_staging(long_corpus, out)
    run.send_signal(signum)
    code = run.wait(timeout=120)
    stderr = run.communicate()[1]
    if signum == signal.SIGTERM:
        assert code == -signal.SIGTERM, stderr  # cleaned up, then terminated by the signal as by default
    else:
        assert code == 130, stderr
    assert debris(tmp_path) == [] and snapshot(out) == before and verified(out)


def test_the_next_run_removes_what_a_killed_run_left(tmp_path: Path, corpus: Path, long_corpus: list[str]) -> None:
    out = tmp_path / "out"
    run = start_and_wait_for_staging(long_corpus, out)
    run.kill()  # SIGKILL: no cleanup can run
    run.communicate()
    assert any(name.startswith(".out.packcli-staging-") for name in debris(tmp_path))
    assert pack(corpus, out) == (0, "")
    assert debris(tmp_path) == [] and verified(out)


def test_a_file_in_the_way_of_out_is_named_as_not_a_directory(tmp_path: Path, corpus: Path) -> None:
    """A file where --out needs a directory is said as such, before any work, not as the lock's 'File exists'."""
    (tmp_path / "afile").write_text("x\n")
    out = tmp_path / "afile" / "packed"
    code, stderr = pack(corpus, out)
    assert code == 1
    assert error_line(stderr) == f"error: {tmp_path / 'afile'}: exists and is not a directory; choose another --out"


def test_a_file_where_the_resume_area_goes_is_named_as_not_a_directory(tmp_path: Path, corpus: Path) -> None:
    """A partitioned run stages in ``.OUT.packcli-resume``; a file of that name is refused in one line naming it,
    not as the operating system's 'File exists', and is left as it was."""
    area = tmp_path / ".packed.packcli-resume"
    area.write_text("x\n")
    code, stderr = pack(corpus, tmp_path / "packed", "--partitions", "2")
    assert code == 1
    assert error_line(stderr) == (
        f"error: {area}: exists and is not a directory (packcli keeps a partitioned run's parts there); "
        "move it away or choose another --out"
    )
    assert area.read_text() == "x\n"


@pytest.fixture
def mount_point(tmp_path: Path) -> Path:  # type: ignore[misc]
    """An empty directory that is a mount point of its own (a bind mount), where the system lets this user mount."""
    point = tmp_path / "volume"
    point.mkdir()
    if subprocess.run(["mount", "--bind", str(point), str(point)], capture_output=True).returncode != 0:
        pytest.skip("needs a bind mount, which this user may not make")
    yield point
    subprocess.run(["umount", str(point)], check=True)


def test_a_mount_point_as_out_is_refused_before_any_work(tmp_path: Path, corpus: Path, mount_point: Path) -> None:
    """An output is swapped into place whole, which a mount point cannot be: say so before packing, not after."""
    code, stderr = pack(corpus, mount_point)
    assert code == 1
    assert error_line(stderr).startswith(f"error: {mount_point}: is a mount point"), stderr
    assert not list(tmp_path.glob(".volume.packcli-*")), "work was staged for an output that cannot be published"


@pytest.mark.parametrize("spelling", [".", ""])
def test_the_current_directory_as_out_is_refused_before_any_work(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    """The output is swapped into place whole: into the current directory, that left the shell in the old, removed
    directory, where the new output looked missing (``ls`` empty, ``packcli stats .``: no manifest.json)."""
    here = tmp_path / "run"
    here.mkdir()
    monkeypatch.chdir(here)
    before = os.stat(here).st_ino
    result = runner.invoke(app, ["pack", str(corpus), "--out", spelling, "--quiet"])
    assert result.exit_code == 1, result.stderr
    assert error_line(result.stderr) == (
        f"error: {spelling or '.'}: is the current directory, which the new output would replace whole (this shell "
        "would be left in the old, removed one); choose a directory inside it as --out (packed, say)"
    )
    assert os.stat(here).st_ino == before and not list(here.iterdir()) and not debris(tmp_path)


@pytest.fixture
def read_only(mount_point: Path) -> Path:
    """The bind mount made read-only, as a read-only volume or file system is."""
    if subprocess.run(["mount", "-o", "remount,ro,bind", str(mount_point)], capture_output=True).returncode != 0:
        pytest.skip("needs a read-only bind mount, which this user may not make")
    return mount_point


def test_an_out_on_a_read_only_file_system_names_out_and_why(corpus: Path, read_only: Path) -> None:
    """The refusal names the --out the user gave and the system's reason, not only a lock file they never named."""
    out = read_only / "packed"
    code, stderr = pack(corpus, out)
    assert code == 1
    assert error_line(stderr) == (
        f"error: {out}: cannot create or lock the output's lock file (.packed.packcli-lock) beside it: Read-only file system"
    ), stderr


def test_an_up_to_date_output_on_a_read_only_file_system_is_up_to_date(corpus: Path, mount_point: Path) -> None:
    """A CI step that packs again over an output on a read-only volume: nothing can change it there, so it is up to
    date as ``--dry-run`` says, and pack ends 0 saying so, writing nothing; a changed run is refused as before."""
    out, exported = mount_point / "packed", mount_point / "megatron"
    assert pack(corpus, out) == (0, "")
    export = ["export", str(out), "--to", "megatron", "--out", str(exported)]
    assert runner.invoke(app, export).exit_code == 0
    if subprocess.run(["mount", "-o", "remount,ro,bind", str(mount_point)], capture_output=True).returncode != 0:
        pytest.skip("needs a read-only bind mount, which this user may not make")
    before = snapshot(mount_point)
    result = runner.invoke(app, ["pack", str(corpus), "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    assert f"{out} is up to date" in result.stdout
    result = runner.invoke(app, export)  # an export is published as a pack is: the same holds
    assert result.exit_code == 0 and f"{exported} is up to date" in result.stdout, result.output
    assert snapshot(mount_point) == before
    code, stderr = pack(corpus, out, "--max-len", "64", "--overwrite")
    assert code == 1
    assert error_line(stderr).startswith(f"error: {out}: cannot create or lock the output's lock file"), stderr
    assert "Read-only file system" in error_line(stderr)


def said_alike(corpus: Path, out: Path, *extra: str) -> tuple[int, str]:
    """The exit code and error line of ``pack`` on ``out``, checked to be those of ``pack --dry-run``: a CI step
    that checks with a dry run first is told what the run would say, not that it would pack."""
    code, stderr = pack(corpus, out, *extra)
    dry_code, dry_stderr = pack(corpus, out, *extra, "--dry-run")
    assert dry_code == code, (out, extra, stderr, dry_stderr)
    if code:
        assert error_line(dry_stderr) == error_line(stderr), (out, extra)
    return code, error_line(stderr) if code else ""


def test_dry_run_on_a_read_only_file_system_says_what_the_run_would_say(corpus: Path, mount_point: Path) -> None:
    """The lock's refusal, another output without --overwrite, directories to make, a directory not packcli's (the
    more useful reason, which the lock file's hid): each said by the dry run as by the run; up to date is 0."""
    out, other, stranger = mount_point / "packed", mount_point / "other", mount_point / "notes"
    stranger.mkdir()
    (stranger / "todo.txt").write_text("mine\n")
    assert pack(corpus, out) == (0, "")
    assert pack(corpus, other, "--max-len", "64") == (0, "")
    if subprocess.run(["mount", "-o", "remount,ro,bind", str(mount_point)], capture_output=True).returncode != 0:
        pytest.skip("needs a read-only bind mount, which this user may not make")
    assert said_alike(corpus, out) == (0, "")
    refused = "cannot create or lock the output's lock file (.packed.packcli-lock) beside it: Read-only file system"
    assert said_alike(corpus, out, "--max-len", "64", "--overwrite") == (1, f"error: {out}: {refused}")
    assert "Read-only file system" in said_alike(corpus, other)[1]
    missing = mount_point / "a"
    said = (1, f"error: {missing}: cannot create the directory that holds the output: Read-only file system")
    assert said_alike(corpus, missing / "b" / "packed") == said
    code, line = said_alike(corpus, stranger)
    assert (code, line.startswith(f"error: {stranger}: holds 'todo.txt' but is not a packcli output")) == (1, True)


def test_dry_run_refuses_the_outs_the_run_refuses_before_any_work(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The current directory, a path through a file: the dry run promised to write there."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.txt").write_text("x\n")
    for out in (Path("."), Path("f.txt") / "sub" / "out"):
        code, line = said_alike(corpus, out)
        assert code == 1 and line, out


UNPRIVILEGED = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]  # root without its capabilities, as a user


def unprivileged(*args: str) -> subprocess.CompletedProcess[str]:
    """``packcli ARGS`` as root without its capabilities (file permissions apply); skips where setpriv cannot."""
    done = subprocess.run([*UNPRIVILEGED, sys.executable, "-m", "packcli", *args], capture_output=True, text=True)
    if "setpriv" in done.stderr:
        pytest.skip(f"needs setpriv to drop capabilities: {done.stderr.strip()}")
    return done


def test_an_out_this_user_may_not_write_is_up_to_date_or_refused_alike(corpus: Path, tmp_path: Path) -> None:
    """Where the lock cannot be made because the directory is not this user's to write, an up-to-date output is
    checked as a reader checks it (as stats does, with no lock) and the run ends 0, as the dry run says; a run
    that would pack is refused by both in the same line."""
    locked = tmp_path / "locked"
    locked.mkdir()
    out = locked / "packed"
    assert pack(corpus, out) == (0, "")
    locked.chmod(0o555)
    try:
        runs = [
            unprivileged("pack", str(corpus), "--out", str(out), *extra, *dry)
            for extra in ([], ["--max-len", "64", "--overwrite"])
            for dry in ([], ["--dry-run"])
        ]
    finally:
        locked.chmod(0o755)
    assert [run.returncode for run in runs] == [0, 0, 1, 1], [run.stderr for run in runs]
    assert f"{out} is up to date" in runs[0].stdout
    assert error_line(runs[2].stderr) == error_line(runs[3].stderr)
    assert error_line(runs[2].stderr).endswith("beside it: Permission denied"), runs[2].stderr


def test_a_lock_file_left_where_this_user_may_not_write_is_neither_written_nor_a_raw_error(
    corpus: Path, tmp_path: Path
) -> None:
    """A killed run's lock file, still writable, in a directory this user may not write: the run wrote its pid into
    it, could not remove it, and ended in a raw ``[Errno 13]``; a lock file that cannot be opened in a writable
    directory was missed by the dry run. Each is now the lock's refusal, or up to date, as the dry run says."""
    place = tmp_path / "place"
    place.mkdir()
    out = place / "packed"
    assert pack(corpus, out) == (0, "")
    for name in ("packed", "new"):
        (place / f".{name}.packcli-lock").write_text("")
    place.chmod(0o555)
    try:
        runs = [
            unprivileged("pack", str(corpus), "--out", str(place / name), *dry)
            for name in ("packed", "new")
            for dry in ([], ["--dry-run"])
        ]
        locks = [(place / f".{name}.packcli-lock").read_text() for name in ("packed", "new")]
    finally:
        place.chmod(0o755)
    assert [run.returncode for run in runs] == [0, 0, 1, 1], [run.stderr for run in runs]
    assert locks == ["", ""]
    assert error_line(runs[2].stderr) == error_line(runs[3].stderr)
    assert error_line(runs[2].stderr).endswith("lock file (.new.packcli-lock) beside it: Permission denied"), runs[
        2
    ].stderr
    lock = tmp_path / ".other.packcli-lock"  # one that this user may not open, where the directory is writable
    lock.write_text("")
    lock.chmod(0o444)
    runs = [unprivileged("pack", str(corpus), "--out", str(tmp_path / "other"), *dry) for dry in ([], ["--dry-run"])]
    assert [run.returncode for run in runs] == [1, 1], [run.stderr for run in runs]
    assert error_line(runs[0].stderr) == error_line(runs[1].stderr), [run.stderr for run in runs]


def test_an_out_this_user_may_not_reach_is_one_line(corpus: Path, tmp_path: Path) -> None:
    """Inside a directory this user may not enter: a raw ``[Errno 13]`` from the run and from the dry run."""
    shut = tmp_path / "shut"
    shut.mkdir()
    shut.chmod(0o600)
    try:
        runs = [unprivileged("pack", str(corpus), "--out", str(shut / "packed"), *dry) for dry in ([], ["--dry-run"])]
    finally:
        shut.chmod(0o755)
    assert [run.returncode for run in runs] == [1, 1], [run.stderr for run in runs]
    assert (
        error_line(runs[0].stderr)
        == error_line(runs[1].stderr)
        == (f"error: {shut / 'packed'}: cannot be read (Permission denied)")
    ), runs[0].stderr


def test_a_directory_this_user_may_write_but_not_read_takes_a_new_output(corpus: Path, tmp_path: Path) -> None:
    """Its entries can be made and renamed, but it cannot be opened to sync: the output was published, and the run
    still ended 1, "cannot move the new output into place" (with --overwrite leaving the old output beside it)."""
    place = tmp_path / "place"
    place.mkdir()
    assert pack(corpus, place / "packed", "--max-len", "64") == (0, "")
    place.chmod(0o311)
    try:
        fresh = unprivileged("pack", str(corpus), "--out", str(place / "new"), "--quiet")
        replaced = unprivileged("pack", str(corpus), "--out", str(place / "packed"), "--overwrite", "--quiet")
    finally:
        place.chmod(0o755)
    assert (fresh.returncode, replaced.returncode) == (0, 0), (fresh.stderr, replaced.stderr)
    assert verified(place / "new") and verified(place / "packed")
    assert sorted(path.name for path in place.iterdir()) == ["new", "packed"]


def test_a_partitioned_output_up_to_date_is_refused_where_a_plain_run_refuses_it(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An up-to-date partitioned run answered before checking where --out is: the current directory was up to
    date for it and refused by a plain run and by the dry run."""
    out = tmp_path / "packed"
    assert pack(corpus, out, "--partitions", "2") == (0, "")
    monkeypatch.chdir(out)
    code, line = said_alike(corpus, Path("."), "--partitions", "2")
    assert code == 1 and "is the current directory" in line, line


def test_dry_run_refuses_another_output_in_the_runs_words(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "packed"
    assert pack(corpus, out) == (0, "")
    code, line = said_alike(corpus, out, "--max-len", "64")
    assert code == 1 and "pass --overwrite to replace it" in line, line


# --- what looks like a datasets cache file but is not one ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["directory", "link", "user file"])
def test_only_a_datasets_cache_file_goes_with_a_replaced_output(tmp_path: Path, corpus: Path, kind: str) -> None:
    """A directory or a link named like a cache file, or a file whose name datasets never makes (its fingerprints
    are 16 hex digits), is the user's: --overwrite refuses, naming it, and leaves it and what it points to alone."""
    out, elsewhere = tmp_path / "packed", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    assert pack(corpus, out)[0] == 0
    name = {"directory": "cache-x.arrow", "link": "cache-0123456789abcdef.arrow", "user file": "cache-mine.arrow"}
    placed = out / name[kind]
    if kind == "directory":
        placed.mkdir()
        (placed / "keep.txt").write_text("mine")
    elif kind == "link":
        placed.symlink_to(elsewhere)
    else:
        placed.write_text("mine")
    code, stderr = pack(corpus, out, "--overwrite", "--max-len", "64")
    assert code == 1 and repr(name[kind]) in stderr, stderr
    assert placed.exists() or placed.is_symlink()
    assert (elsewhere / "keep.txt").read_text() == "mine"
    assert kind != "directory" or (placed / "keep.txt").read_text() == "mine"


def test_a_datasets_cache_file_and_its_sharded_twins_go_with_a_replaced_output(tmp_path: Path, corpus: Path) -> None:
    out = tmp_path / "packed"
    assert pack(corpus, out)[0] == 0
    for name in ("cache-0123456789abcdef.arrow", "cache-fedcba9876543210_00001_of_00004.arrow"):
        (out / name).write_bytes(b"derived")
    assert pack(corpus, out, "--overwrite", "--max-len", "64")[0] == 0
    assert list(out.glob("cache-*")) == [] and verified(out)


@pytest.mark.parametrize("before", ["empty", "output"])
def test_the_output_keeps_the_permissions_of_the_directory_it_replaces(
    tmp_path: Path, corpus: Path, before: str
) -> None:
    """A directory the user made for the output (a group's setgid directory, a mode of their choosing), empty or
    holding an earlier output, keeps its mode when the new output is swapped into its place."""
    out = tmp_path / "packed"
    if before == "empty":
        out.mkdir()
    else:
        assert pack(corpus, out)[0] == 0
    os.chmod(out, 0o2750)
    code, _ = pack(corpus, out, "--overwrite", "--max-len", "128")
    assert code == 0
    assert oct(out.stat().st_mode & 0o7777) == oct(0o2750)
    assert verified(out)


_FORK_WITH_A_LOCK = """
import os, sys, time
from packcli.util.locks import FileLock
lock = FileLock(__import__("pathlib").Path(sys.argv[1]))
assert lock.acquire()
started, ready = os.pipe()
child = os.fork()
if child == 0:  # a worker forked while its driver holds the output's lock, outliving it a moment
    os.write(ready, b"1")
    time.sleep(30)
    os._exit(0)
os.read(started, 1)  # the child runs
lock.release()  # as a killed driver's reference goes
print("free" if FileLock(__import__("pathlib").Path(sys.argv[1])).acquire(wait=False) else "held")
os.kill(child, 9)
os.waitpid(child, 0)
"""


def test_a_forked_child_holds_none_of_its_parent_s_locks(tmp_path: Path) -> None:
    """A run's lock is free once the run is gone, even while a worker it forked lives on a moment (a kill -9 of the
    driver, then an immediate rerun: the rerun was refused as 'in use by pid N', N the dead driver)."""
    result = subprocess.run(
        [sys.executable, "-c", _FORK_WITH_A_LOCK, str(tmp_path / ".out.packcli-lock")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "free"


def test_a_previous_output_that_cannot_be_removed_is_named_in_a_warning(tmp_path: Path, corpus: Path) -> None:
    """``--overwrite`` over an output holding a file nobody may remove (``chattr +i``): the new output is published
    (exit 0), and a warning names where what is left of the old one stays, rather than leaving it there unsaid."""
    out = tmp_path / "packed"
    assert pack(corpus, out)[0] == 0
    pinned = next(out.glob("shard-*.arrow"))
    if subprocess.run(["chattr", "+i", str(pinned)], capture_output=True, check=False).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and a file system that has it)")
    try:
        result = runner.invoke(app, ["pack", str(corpus), "--out", str(out), "--overwrite", "--max-len", "64"])
        code, stderr = result.exit_code, result.stderr  # not --quiet, which keeps warnings to the summary
        left = [path for path in tmp_path.iterdir() if path.name.startswith(".packed.packcli-")]
        assert code == 0 and verified(out), stderr
        assert len(left) == 1 and (left[0] / pinned.name).exists(), left
        assert f"warning: the previous output could not be removed whole: what is left of it is in {left[0]}" in stderr
    finally:
        for path in tmp_path.rglob(pinned.name):
            subprocess.run(["chattr", "-i", str(path)], check=False)
