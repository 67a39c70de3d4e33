"""The Ray engine (``--engine ray``, the ``packcli[ray]`` extra): the same partitions as calls on a pool of Ray
actors, for a cluster. Ray schedules; it carries no tokens: each call reads its slices from the inputs and writes
its part (to a directory every node sees, or built on its node's scratch and uploaded to the output's store) and
returns a small result.

Where: ``--ray-address``, else ``RAY_ADDRESS``, else a Ray already initialised in this process, else a local Ray
that packcli starts and stops. The pool: ``--workers`` actors (default: the cluster's CPUs less one), spread over
the nodes, each loading the driver's tokenizer once from bytes put in the object store. The pool stays below the
cluster's CPU count (an actor takes one CPU; fractions when asked for more actors than that): actors holding every
CPU slot starve other Ray work on the cluster, as Ray Data's read tasks are starved in ray-project/ray issue 44687.

Signals: no handler of ours runs inside a call into Ray. Ray's compiled code checks for signals while it blocks and
knows only ``KeyboardInterrupt``: the CLI's Ctrl-C exception raised there came out as a ``SystemError``, and one that
cut ``ray.init`` short left a half-started Ray that crashed the interpreter at exit. So every call into Ray runs with
signals held (:func:`~packcli.util.signals.signals_held`), waits are short (``WAIT_S``), and a Ctrl-C or SIGTERM takes
effect between them, in Python, where the run unwinds and Ray is shut down. ``ray.init`` also puts its own SIGTERM
handler in place of the CLI's: ours is put back.

Output: a Ray that packcli starts or connects to prints nothing of its own. A driver echoes the cluster's notices
(a dead worker's, a full page) to standard output, where ``--json`` writes its object; the run says each failure
itself, in one line, so while the engine holds a Ray it started, this process's standard output goes nowhere (Ray
prints those notices whatever ``log_to_driver`` says; the run writes nothing there until it is done).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from collections.abc import Sequence
from contextlib import ExitStack, redirect_stdout
from types import ModuleType, TracebackType
from typing import Any
from urllib.parse import urlsplit

from packcli.engines import OnResult, Start, Task
from packcli.engines.reaper import reaping_descendants
from packcli.errors import PackcliError, requires_extra
from packcli.util.signals import signals_held

__all__ = ["RayEngine"]

CONNECT_TIMEOUT_S = 5.0
WAIT_S = 0.2  # the longest a signal waits for a blocking call into Ray to return
LOCAL_OBJECT_STORE = 128 * 2**20  # only the tokenizer (a few MB) goes through it, never tokens


class WorkerActor:
    """A Ray actor: runs the driver's ``start`` once, then jobs with the task it is given."""

    def __init__(self, threads: int, start: Start | None, shipped: Any) -> None:
        self.state = start(shipped, threads) if start is not None else None

    def run(self, task: Task, job: Any) -> Any:
        return task(self.state, job)


def import_ray() -> ModuleType:
    """The ``ray`` module, or one clear error saying how to install it."""
    with requires_extra("ray", "--engine ray"):
        import ray
    return ray


class RayEngine:
    """Runs partitions on Ray; connects on entry (a local Ray it started is stopped on exit).

    Args:
        workers: actors in the pool (None: the cluster's CPUs less one, at least one).
        address: the cluster (``--ray-address``); None: ``RAY_ADDRESS``, else a local Ray.
    """

    def __init__(self, workers: int | None, address: str | None) -> None:
        self.workers = workers
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self._ray: Any = None
        self._started = False
        self._reaper = ExitStack()

    def __enter__(self) -> RayEngine:
        ray = self._ray = import_ray()
        if ray.is_initialized():  # an enclosing script (or a test session) holds the connection
            return self
        # Ray's own notices (its token authentication, say) are about Ray, not the data: errors only.
        options: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
        if self.address is None:
            # Ray's daemons end with this process, but not the agents they start: the reaper ends those too.
            self._reaper.enter_context(reaping_descendants())
            options |= {
                "address": "local",
                "num_cpus": os.cpu_count(),
                "include_dashboard": False,
                "object_store_memory": LOCAL_OBJECT_STORE,
            }
        else:
            _check_reachable(self.address)
            options["address"] = self.address
        # Ray prints the cluster's notices (a dead worker's page) on standard output whatever log_to_driver says
        self._reaper.enter_context(redirect_stdout(self._reaper.enter_context(open(os.devnull, "w"))))
        terminate = signal.getsignal(signal.SIGTERM)
        try:
            with signals_held():  # a Ctrl-C waits until Ray is up, and then shuts it down
                try:
                    ray.init(**options)
                except Exception as exc:  # Ray raises ConnectionError, RuntimeError or ValueError here
                    where = f"at {self.address}" if self.address else "locally"
                    raise PackcliError(f"cannot start or reach Ray {where}: {exc}") from None
                self._started = True
                if callable(terminate):  # the CLI's handler (a library caller's default stays Ray's to replace)
                    signal.signal(signal.SIGTERM, terminate)  # ray.init put its own in place of it
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop()

    def _stop(self) -> None:
        """Shut down the Ray this engine started, and end the reaper; never cut short by a signal."""
        with signals_held():
            if self._started:
                self._ray.shutdown()
                self._started = False
            self._reaper.close()

    def run(self, jobs: Sequence[Any], task: Task, on_result: OnResult, start: Start | None, shipped: Any) -> None:
        """Run ``jobs``, one actor call each, calling ``on_result`` as each finishes (see :class:`Engine`)."""
        ray = self._ray
        actors: list[Any] = []
        running: dict[Any, tuple[Any, int]] = {}  # call -> its actor and job
        failures: dict[int, BaseException] = {}
        try:
            with signals_held():  # each step into Ray whole; a signal takes effect between steps (see above)
                cpus = float(ray.cluster_resources().get("CPU", 1.0))
                size = max(1, min(len(jobs), self.workers or int(cpus) - 1))
                spare = cpus - 1 if cpus > 1 else cpus / 2  # leave one CPU to the rest of the cluster
                # spread over the nodes: each node's scratch, disk and network take their share of the parts
                actor_class = ray.remote(num_cpus=min(1.0, spare / size), scheduling_strategy="SPREAD")(WorkerActor)
                shipped_ref = ray.put(shipped)
                # Tokenizer threads: the actor's share of the cores, assuming actors spread evenly over the nodes.
                actors = [actor_class.remote(max(1, int(cpus) // size), start, shipped_ref) for _ in range(size)]
            waiting = list(reversed(list(enumerate(jobs))))
            while running or (waiting and not failures):
                with signals_held():
                    while actors and waiting and not failures:
                        actor, (index, job) = actors.pop(), waiting.pop()
                        running[actor.run.remote(task, job)] = (actor, index)
                    done, _ = ray.wait(list(running), num_returns=1, timeout=WAIT_S)
                    results = []
                    for ref in done:
                        actor, index = running.pop(ref)
                        actors.append(actor)
                        try:
                            results.append(_result(ray, ref))
                        except Exception as error:
                            if not isinstance(error.__cause__, ray.exceptions.RayTaskError):
                                raise  # the actor died: no job's failure
                            failures[index] = error
                for result in results:
                    on_result(result)
        finally:
            with signals_held():
                for actor in [*actors, *(actor for actor, _ in running.values())]:
                    ray.kill(actor)
        if failures:
            raise failures[min(failures)]


def _result(ray: Any, ref: Any) -> Any:
    """A finished call's result. Raises a one-line error for a dead actor, and the job's own error (out of memory,
    say) for a job that raised, not Ray's page: its ``__cause__`` is Ray's task error."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayActorError as exc:
        said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]  # then a page of Ray's diagnostics
        raise PackcliError(
            f"a Ray actor died (its node lost, or out of memory?): {said}; the partitions committed are kept: "
            "rerun the same command to resume"
        ) from None
    except ray.exceptions.RayTaskError as exc:
        raise (exc.cause if isinstance(exc.cause, Exception) else exc) from exc


def _check_reachable(address: str) -> None:
    """Fail fast, in one line, when a ``host:port`` or ``ray://host:port`` address does not answer (Ray itself
    would retry for a minute or more)."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number
        raise PackcliError(f"--ray-address {address}: expected HOST:PORT or ray://HOST:PORT") from None
    if host is None or port is None:
        return  # "auto" and the like: Ray resolves them
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise PackcliError(
            f"cannot reach Ray at {address}: {exc.strerror or exc}; check --ray-address (or RAY_ADDRESS) and that "
            "the cluster is up (ray start --head)"
        ) from None
