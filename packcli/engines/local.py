"""The local engine: a pool of worker processes on this machine (``--workers N``, default all cores), each with
its share of the cores as tokenizer threads. Workers are spawned, not forked (a fork would copy the driver's
tokenizer thread pool in a broken state), and each runs the driver's ``start`` once (loading what it shipped).

Once ``on_result`` says stop, no new job starts; those running finish (and stay committed for a rerun).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from packcli.engines import OnResult, Start, Task, Unconnected
from packcli.engines.reaper import die_with_parent, ignoring_ctrl_c, reaping_descendants
from packcli.errors import PackcliError

__all__ = ["LocalEngine"]


def _start_worker(driver: int, threads: int, start: Callable[[Any, int | None], None] | None, shipped: Any) -> None:
    die_with_parent(driver)  # a second guard beside the reaper: a worker never outlives its driver
    if start is not None:
        start(shipped, threads)


class LocalEngine(Unconnected):
    """Runs partitions in a process pool; use as a context manager (it holds nothing between runs).

    Args:
        workers: worker processes (None: one per core), never more than there are partitions to run.
    """

    def __init__(self, workers: int | None) -> None:
        self.workers = workers

    def run(self, jobs: Sequence[Any], task: Task, on_result: OnResult, start: Start | None, shipped: Any) -> None:
        """Run ``task(job)`` for each job, calling ``on_result`` as each finishes; it returns False to start no
        further job."""
        cores = os.cpu_count() or 1
        size = max(1, min(len(jobs), self.workers or cores))
        with reaping_descendants():  # no worker outlives this process, even after kill -9
            self._run(jobs, task, on_result, (os.getpid(), max(1, cores // size), start, shipped), size)

    def _run(self, jobs: Sequence[Any], task: Task, on_result: OnResult, initargs: tuple[Any, ...], size: int) -> None:
        context = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(size, mp_context=context, initializer=_start_worker, initargs=initargs)
        try:
            with ignoring_ctrl_c():  # workers start ignoring it: the driver stops them itself, with no tracebacks
                futures: list[Future[Any]] = [pool.submit(task, job) for job in jobs]  # starts the workers
            for future in as_completed(futures):
                if future.cancelled():
                    continue
                if not on_result(future.result()):
                    for other in futures:
                        other.cancel()
        except BrokenProcessPool:
            raise PackcliError(
                "a worker process died (killed, or out of memory?); the partitions it committed are kept: "
                "rerun the same command to resume"
            ) from None
        except BaseException:  # a signal, Ctrl-C or a failed partition: no worker may outlive the run or its lock
            for process in list(pool._processes.values()):  # no public way to stop them before Python 3.14
                process.terminate()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
