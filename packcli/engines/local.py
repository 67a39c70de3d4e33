"""The local engine: a pool of worker processes on this machine (``--workers N``, default all cores), each with
its share of the cores as tokenizer threads. Workers are spawned, not forked (a fork would copy the driver's
tokenizer thread pool in a broken state), and each loads the driver's tokenizer once from the shipped bytes.

Once a partition fails, no new partition starts; those running finish and stay committed for a rerun.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from types import TracebackType

from packcli.encode.tokenizer import LoadedTokenizer
from packcli.engines.partition import PartitionJob, PartitionResult, ShippedTokenizer, run_partition
from packcli.engines.reaper import reaping_descendants
from packcli.errors import PackcliError

__all__ = ["LocalEngine"]

_tokenizer: LoadedTokenizer | None = None  # a worker process's tokenizer (None: pre-tokenized records)


def _start_worker(shipped: ShippedTokenizer | None, threads: int) -> None:
    global _tokenizer
    os.environ["RAYON_NUM_THREADS"] = str(threads)  # read when the tokenizer first starts its thread pool
    _tokenizer = shipped.load() if shipped is not None else None


def _run(job: PartitionJob) -> PartitionResult:
    return run_partition(job, _tokenizer)


class LocalEngine:
    """Runs partitions in a process pool; use as a context manager (it holds nothing between runs).

    Args:
        workers: worker processes (None: one per core), never more than there are partitions to run.
    """

    def __init__(self, workers: int | None) -> None:
        self.workers = workers

    def __enter__(self) -> LocalEngine:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        pass

    def run(
        self,
        jobs: Sequence[PartitionJob],
        tokenizer: ShippedTokenizer | None,
        on_result: Callable[[PartitionResult], bool],
    ) -> None:
        """Run ``jobs``, calling ``on_result`` as each finishes; it returns False to start no further job."""
        cores = os.cpu_count() or 1
        size = max(1, min(len(jobs), self.workers or cores))
        with reaping_descendants():  # no worker outlives this process, even after kill -9
            self._run(jobs, tokenizer, on_result, size, max(1, cores // size))

    def _run(
        self,
        jobs: Sequence[PartitionJob],
        tokenizer: ShippedTokenizer | None,
        on_result: Callable[[PartitionResult], bool],
        size: int,
        threads: int,
    ) -> None:
        context = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(
            size, mp_context=context, initializer=_start_worker, initargs=(tokenizer, threads)
        )
        try:
            futures: list[Future[PartitionResult]] = [pool.submit(_run, job) for job in jobs]  # starts the workers
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
