"""Rendering many files at once: in worker processes, or in Ray actors on a cluster.

The run plans its jobs against the output folder's manifest (:mod:`.manifest`: a file made
the same way is skipped) and hands them to workers (:class:`~.worker.Worker`), longest first,
each to the first worker free. The convolution forms the first file's engine chose
(:func:`.passes.convolution.form_plan`) are handed to every other file before the others start,
so a file's bytes do not depend on which worker rendered it, nor on the files before it.

In a process pool each worker writes a hidden pending file beside the output, which the driver
renames into place and records as it learns it is complete. On Ray the driver sends each
input's bytes to an actor and writes the file the actor sends back: the machines of a cluster
need no shared storage.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BendingError
from ..files import check_writable, commit, discard, writing
from .manifest import Manifest, made_by
from .worker import Done, Job, Recipe, Worker, pending


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass
class Plan:
    """The jobs of a run left after the manifest, and what it skipped."""

    jobs: list[Job]
    skipped: list[Job]
    manifest: Manifest
    made: dict[str, dict[str, Any]]  #: by target


def plan_jobs(recipe: Recipe, jobs: list[Job], folder: Path, force: bool) -> Plan:
    """Skip the jobs whose file the manifest says was made the same way; refuse (before
    anything is rendered) an existing file made otherwise, unless ``force``. Retuning, the
    manifest's forms are dropped and its files made again (the forms may change)."""
    manifest = Manifest(folder)
    check_writable(manifest.path)  # before anything is rendered: a link there is refused
    if recipe.retune is not None:
        manifest.plan = []
    identity = recipe.identity()
    todo, skipped, made = [], [], {}
    for job in jobs:
        what = made[job.target] = made_by(identity, job)
        target = Path(job.target)
        if manifest.made(target, what) and not force and recipe.retune is None:
            skipped.append(job)
        elif target.exists() and not force and not manifest.made(target, what):
            why = (
                "changed since this render made it"
                if manifest.changed(target)
                else "exists and was not made by this render"
            )
            raise BendingError(f"{target} {why}: pass --force to overwrite it")
        else:
            todo.append(job)
    return Plan(todo, skipped, manifest, made)


def run_jobs(
    recipe: Recipe,
    plan: Plan,
    workers: int,
    ray_address: str | None = None,
    done: Callable[[Done], None] = lambda d: None,
    record: bool = True,
) -> None:
    """Render the plan's jobs in ``workers`` processes (1: in this one), or Ray actors
    (``ray_address``: ``"local"`` starts or joins a local cluster, ``""`` joins the one this
    process started), calling ``done`` and, with ``record``, recording each file in the
    manifest as it completes."""
    if not plan.jobs:
        return
    workers = max(1, min(workers, len(plan.jobs)))
    if ray_address is not None:
        results = _on_ray(recipe, plan, workers, ray_address)
    elif workers == 1:
        results = _here(recipe, plan)
    else:
        results = _in_pool(recipe, plan, workers)
    try:
        for result in results:
            with _signals_held():  # a file put in place is recorded with it
                if ray_address is None:
                    commit(pending(result.target), result.target)
                plan.manifest.plan = result.plan
                if record:
                    plan.manifest.record(Path(result.target), plan.made[result.target])
                done(result)
    finally:
        results.close()  # the workers stopped: nothing more is written
        for job in plan.jobs:
            discard(pending(job.target))


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM held back until the block ends, then handled as they would have
    been (in the main thread; elsewhere nothing is held: only it receives them)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, Any]] = []
    held = (signal.SIGINT, signal.SIGTERM)
    handlers = {n: signal.signal(n, lambda *received: caught.append(received)) for n in held}
    try:
        yield
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
        for number, frame in caught[:1]:
            handler = handlers[number]
            if callable(handler):
                handler(number, frame)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(number)


def _here(recipe: Recipe, plan: Plan) -> Iterator[Done]:
    worker = Worker(recipe)
    for job in plan.jobs:
        yield worker.render(job, plan.manifest.plan)


_WORKER: Worker | None = None


def _start_worker() -> None:
    """A pool process: Ctrl-C is the driver's to handle, which stops the pool with SIGTERM;
    that discards what the process writes and ends it without a word."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_quietly)


def _stop_quietly(signum: int, frame: Any) -> None:
    sys.stderr = open(os.devnull, "w")  # the process is ending: no traceback of the stop
    raise KeyboardInterrupt


def _pool_render(recipe: Recipe, job: Job, plan: list) -> Done:
    """Render in a pool process: a forked one has the command's model; a spawned one loads
    it at its first job (loaded in the pool's initializer, a model that fails to load would
    start process after process)."""
    global _WORKER
    if _WORKER is None:
        _WORKER = Worker(recipe)
    return _WORKER.render(job, plan)


def _in_pool(recipe: Recipe, plan: Plan, workers: int) -> Iterator[Done]:
    """This process and ``workers - 1`` others, all taking the longest file left whenever
    they are free. This one loads the model and starts on the shortest file: once its engine
    has chosen the convolution forms, which go to every other file, the others start (on
    Linux with the CPU forked from this one, ready at once with the model and the forms; a
    spawned process imports torch and loads the model for seconds; where one may not be forked,
    :func:`_can_fork`, they are spawned first). A pool process is handed its next file as it
    reports one, not when this process is between two of its own. The pool is stopped, each
    process discarding its unfinished file, when the run ends or is interrupted."""
    global _WORKER
    forked = _can_fork(recipe)
    context = multiprocessing.get_context("fork" if forked else "spawn")
    pool = None if forked else context.Pool(workers - 1, _start_worker)
    try:
        waiting = deque(_longest_first(plan.jobs))
        finished: queue.SimpleQueue = queue.SimpleQueue()
        forms: list = []

        def start(chosen: list) -> None:
            """The first file's engine has chosen the forms: start the others."""
            nonlocal pool
            forms[:] = chosen
            pool = pool or context.Pool(workers - 1, _start_worker)  # with the model, forms
            for _ in range(workers - 1):
                send()

        def send() -> None:
            """Hand the longest file left to the pool (from its result thread, as a result
            comes in)."""
            with contextlib.suppress(IndexError, ValueError):  # none left, the pool stopped
                job = waiting.popleft()
                pool.apply_async(
                    _pool_render, (recipe, job, forms), callback=report, error_callback=report
                )

        def report(result: Done | BaseException) -> None:
            finished.put(result)
            if isinstance(result, Done):
                send()

        here = _WORKER = Worker(recipe)
        yield here.render(waiting.pop(), plan.manifest.plan, chosen=start)
        for _ in range(len(plan.jobs) - 1):
            try:
                result = finished.get_nowait()
            except queue.Empty:
                try:
                    job = waiting.popleft()
                except IndexError:
                    result = finished.get()
                else:
                    result = here.render(job, forms)
            if isinstance(result, BaseException):
                raise result
            yield result
    except BaseException:
        if pool is not None:
            pool.terminate()
        raise
    finally:
        _WORKER = None
        if pool is not None:
            pool.close()
            pool.join()


def _can_fork(recipe: Recipe) -> bool:
    """Whether pool processes may be forked from this one: on Linux, with the CPU, one torch
    thread (no OpenMP pool started here, which a forked child could not use) and no other
    thread running here (a lock one held would stay locked in the child)."""
    return (
        recipe.device == "cpu"
        and recipe.threads == 1
        and sys.platform.startswith("linux")
        and threading.active_count() == 1
    )


def _longest_first(jobs: list[Job]) -> list[Job]:
    """The jobs by their input's duration, longest first: the last files handed out are the
    short ones, so no process is left with a long one while the others have finished."""
    from .frames import source_info

    return sorted(jobs, key=lambda job: -source_info(Path(job.source)).duration)


def _on_ray(recipe: Recipe, plan: Plan, workers: int, address: str) -> Iterator[Done]:
    """One actor per worker (one CPU, and one GPU with ``--device cuda``), each loading the
    model once; the driver sends the inputs' bytes and writes the outputs. One actor makes an
    engine for the shortest file first, whose forms go to every file; then each actor has two
    files at a time, the longest left first, so that none waits for the driver between two."""
    from .frames import source_info

    try:
        import ray
    except ImportError:
        raise BendingError(
            "--ray needs Ray: pip install 'bendserver[ray]' (on every machine of the cluster)"
        ) from None
    started = not ray.is_initialized()
    if started and not address:
        raise BendingError(
            "--ray needs the address of a cluster (--ray auto, --ray ray://HEAD:10001): a Ray "
            "started here listens on every interface of this machine (Ray cannot keep it to "
            "loopback); --workers N renders here in a process pool, --ray local starts Ray "
            "anyway"
        )
    if started:
        local = address == "local"
        ray.init(
            address=None if local else address,
            num_cpus=workers if local else None,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
    try:
        gpus = 0 if recipe.device == "cpu" else 1  # an actor per GPU: it sees it as cuda:0
        actor = ray.remote(num_cpus=1, num_gpus=gpus)(Worker)
        actors = [actor.remote(recipe) for _ in range(workers)]
        waiting = deque(_longest_first(plan.jobs))
        channels = 1 if recipe.mono else source_info(Path(waiting[-1].source)).channels
        forms = ray.get(actors[0].forms.remote(channels, plan.manifest.plan))

        def send(to: Any) -> Any:
            job = waiting.popleft()
            return to.render_bytes.remote(job, forms, Path(job.source).read_bytes())

        calls = {}
        for to in actors * 2:  # two files each: the next one is there when one is done
            if waiting:
                calls[send(to)] = to
        while calls:
            [call], _ = ray.wait(list(calls))
            to = calls.pop(call)
            if waiting:
                calls[send(to)] = to
            done, data = ray.get(call)
            with writing(done.target) as temp:
                temp.write_bytes(data)
            yield done
    finally:
        if started:
            ray.shutdown()
