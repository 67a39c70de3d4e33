"""The local engine: worker processes on this machine (``--workers N``, default all cores), each with its share of
the cores as tokenizer threads.

The first worker is forked from the driver where that is safe: on Linux, when the driver runs no thread of
Python's but its own and holds no tokenizer's thread pool (the caller says so: packcli's own command, before any
encoding), so that the worker finds packcli and its libraries imported (about 0.3 CPU s less per run than a fresh
interpreter). Otherwise (a progress display's thread, a Python caller's process, another system) it is spawned: a
fork would copy those threads' state without the threads (a tokenizer's pool would hang). It runs the driver's
``start`` once, building the tokenizers it shipped, and then forks the other workers from itself, before any
encoding started a thread pool: they begin with all of that done, so a run pays it once whatever its worker count,
and the workers share the built tokenizers' memory.

Each worker takes one job at a time over its own pipe. A job that raises stops the start of further jobs; those
running finish (and stay committed for a rerun), then the first failed job's error, in job order, is raised. A
worker that dies (killed, out of memory) is an error; on any error, signal or Ctrl-C the driver kills every worker.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Sequence
from contextlib import suppress
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection, wait
from typing import Any

from packcli.engines import OnResult, Start, Task, Unconnected
from packcli.engines.reaper import die_with_parent, ignoring_ctrl_c, reaping_descendants
from packcli.errors import PackcliError

__all__ = ["LocalEngine"]


def _first_worker(driver: int, threads: int, start: Start | None, task: Task, pipes: list[Connection]) -> None:
    """Worker 0: take what the driver ships, start once, fork one worker for each other pipe, serve its own, then
    wait for the others."""
    for signum in (signal.SIGTERM, signal.SIGHUP):  # a forked worker has the driver's handler, which holds them
        signal.signal(signum, signal.SIG_DFL)  # back here for good: they end it, as they do a spawned one
    die_with_parent(driver)  # a second guard beside the reaper: a worker never outlives its driver
    shipped = pipes[0].recv()
    state = start(shipped, threads) if start is not None else None
    forked = []
    for pipe in pipes[1:]:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                for other in pipes:
                    if other is not pipe:
                        other.close()
                die_with_parent(parent)
                _serve(task, state, pipe)
            finally:
                os._exit(0)
        forked.append(pid)
        pipe.close()
    _serve(task, state, pipes[0])
    for pid in forked:
        os.waitpid(pid, 0)


def _serve(task: Task, state: Any, pipe: Connection) -> None:
    """Say this worker's pid, then run each job the driver sends until it sends None (or is gone)."""
    with suppress(EOFError, OSError):
        pipe.send(os.getpid())
        while (sent := pipe.recv()) is not None:
            index, job = sent
            reply: tuple[int, Any, Exception | None]
            try:
                reply = (index, task(state, job), None)
            except Exception as exc:
                reply = (index, None, exc)
            try:
                pipe.send(reply)
            except Exception as exc:  # an error that does not pickle: its words still reach the driver
                pipe.send((index, None, PackcliError(f"{type(reply[2]).__name__}: {reply[2]} ({exc})")))


class LocalEngine(Unconnected):
    """Runs jobs in worker processes; use as a context manager (it holds nothing between runs).

    Args:
        workers: worker processes (None: one per core), never more than there are jobs.
        fork: the caller started no thread pool in this process, so the first worker may be forked from it.
    """

    def __init__(self, workers: int | None, fork: bool = False) -> None:
        self.workers, self.fork = workers, fork

    def run(self, jobs: Sequence[Any], task: Task, on_result: OnResult, start: Start | None, shipped: Any) -> None:
        """Run ``task(job)`` for each job, calling ``on_result`` as each finishes (see :class:`Engine`)."""
        cores = os.cpu_count() or 1
        size = max(1, min(len(jobs), self.workers or cores))
        forked = self.fork and sys.platform == "linux" and threading.active_count() == 1
        context = multiprocessing.get_context("fork") if forked else multiprocessing.get_context("spawn")
        pipes = [context.Pipe() for _ in range(size)]
        theirs = [end for _, end in pipes]
        first = context.Process(target=_first_worker, args=(os.getpid(), max(1, cores // size), start, task, theirs))
        pids: list[int] = []
        with reaping_descendants():  # no worker outlives this process, even after kill -9
            try:
                resource_tracker.ensure_running()  # it unblocks Ctrl-C as it starts: not inside the block below
                with ignoring_ctrl_c():  # workers start ignoring it: the driver stops them itself, with no tracebacks
                    first.start()
                for end in theirs:
                    end.close()  # a worker's end is its own: its death reads as the end of its pipe
                try:  # over the worker's pipe, not its start-up data: a worker dead before reading it is no hang
                    pipes[0][0].send(shipped)
                except OSError:
                    raise _died() from None
                _share([mine for mine, _ in pipes], list(jobs), on_result, pids)
            except BaseException:  # a signal, Ctrl-C or a dead worker: no worker may outlive the run or its lock
                for pid in pids:
                    with suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                first.kill()
                raise
            finally:
                for mine, _ in pipes:
                    mine.close()
                first.join()


def _share(pipes: list[Connection], jobs: list[Any], on_result: OnResult, pids: list[int]) -> None:
    """Hand the jobs to the workers as each is free, until none is left or one failed; then raise the first
    failure in job order. ``pids``: filled with the workers' pids as they start."""
    waiting = list(reversed(list(enumerate(jobs))))
    failures: dict[int, BaseException] = {}
    running: set[Connection] = set()
    open_pipes = list(pipes)
    while open_pipes:
        for pipe in wait(open_pipes):
            assert isinstance(pipe, Connection)
            try:
                message = pipe.recv()
            except (EOFError, OSError):
                raise _died() from None
            if pipe in running:
                running.discard(pipe)
                index, result, error = message
                if error is not None:
                    failures[index] = error
                else:
                    on_result(result)
            else:
                pids.append(message)  # a worker started
            try:
                if waiting and not failures:
                    pipe.send(waiting.pop())
                    running.add(pipe)
                else:
                    pipe.send(None)
                    open_pipes.remove(pipe)
            except OSError:
                raise _died() from None
    if failures:
        raise failures[min(failures)]


def _died() -> PackcliError:
    return PackcliError(
        "a worker process died (killed, or out of memory?); the partitions it committed are kept: "
        "rerun the same command to resume"
    )
