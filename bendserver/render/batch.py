"""Rendering many files at once: in worker processes, or in Ray actors on a cluster.

Each worker loads the model once and renders every file it is given from a fresh copy of it
(a TorchScript model is loaded again: its copy would not be the one the bending reaches), so
the streaming state a file leaves in a model's buffers never reaches the next file, with
torch's random seed set to the run's (a model that draws noise, RAVE's encoder, draws the same
for a file in any process, whatever came before), one torch thread each, through
:func:`.render.render_file`. The convolution forms the first file's engine chose
(:func:`.passes.convolution.form_plan`) are handed to every other file before the others
start, so a file's bytes do not depend on which worker rendered it, nor on the files before
it. Files are handed out longest first, each to the first worker free. A manifest
in the output folder (``.bendserver-render.json``) records what made each file (model, preset,
score, options, the input's digest) and those forms: a file already made the same way is
skipped, so an interrupted run resumes where it stopped.

In a process pool each worker writes a hidden pending file beside the output, which the driver
renames into place and records as it learns it is complete. On Ray the driver sends each
input's bytes to an actor and writes the file the actor sends back: the machines of a cluster
need no shared storage.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import multiprocessing
import os
import queue
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import BendingError
from ..files import check_writable, commit, discard, write_text, writing
from ..play import PlayOptions
from ..rackspec import RackSpec
from ..readers import read_json
from .offline import ScoreEvent, render_file

#: The manifest's name in the output folder (hidden: a folder of sound files does not list it).
MANIFEST = ".bendserver-render.json"


@dataclass(frozen=True)
class Recipe:
    """What makes every file of a run but its input and its score: the model and the options."""

    model: str
    #: The models of a rack (repeated ``-m``, ``--rack``; None: ``model`` alone).
    rack: RackSpec | None = None
    models_dir: tuple[str, ...] = ()
    versions: tuple[str, ...] = ()
    preset: str | None = None
    block: int | None = None
    device: str = "cpu"
    fuse: bool = True
    optimize: str = "passes"
    mono: bool = False
    sample_rate: int | None = None
    resample: bool = True
    keep_latency: bool = False
    latency: int | None = None  #: the model's latency in samples (None: its own, or measured)
    threads: int = 1  #: torch threads (several sum in another order: other bytes)
    seed: int = 0  #: torch's random seed at the start of every file
    #: ``--retune``: convolution forms chosen before this time (``time.time()``) are measured
    #: again (:func:`.passes.convolution.retune`); None: the stored choices play.
    retune: float | None = None

    def identity(self) -> dict[str, Any]:
        """The recipe as the manifest records it: files given by path (model, preset, versions)
        by their digest too, so that a changed file renders again."""
        made = asdict(self)
        del made["retune"]  # the forms are recorded apart
        for key in ("model", "preset"):
            made[f"{key}_digest"] = _digest_if_file(made[key])
        made["versions_digest"] = [_digest_if_file(v) for v in self.versions]
        return made

    def playing(self) -> PlayOptions:
        """What plays every file."""
        return PlayOptions(
            model=self.model,
            rack=self.rack,
            preset=self.preset,
            models_dir=self.models_dir,
            versions=self.versions,
            latency=self.latency,
            block=self.block,
            device=self.device,
            optimize=self.optimize,
            fuse=self.fuse,
        )


@dataclass(frozen=True)
class Job:
    """One file to render: its input, its output, the score's events and, in a sweep, the
    settings of its cell (applied as events at 0 s)."""

    source: str
    target: str
    events: tuple[ScoreEvent, ...] = ()
    settings: tuple[tuple[str, float], ...] = ()


@dataclass
class Done:
    """What a worker reports of a rendered file."""

    target: str
    seconds: float
    channels: int
    blocks: int
    block: int
    p50_ms: float
    max_ms: float
    errors: int
    nonfinite: int
    limited: int
    process: int  #: the id of the process that rendered it
    began: float  #: when it began and ended (``time.time()``: a breakdown of a run's time)
    ended: float
    plan: list = field(default_factory=list)  #: the worker's convolution forms after it

    def line(self) -> str:
        return (
            f"wrote {self.target} ({self.seconds:.2f} s, {self.channels} ch, {self.blocks} "
            f"blocks of {self.block}, compute p50 {self.p50_ms:.2f} ms, max {self.max_ms:.2f} "
            f"ms, {self.errors} errors, {self.nonfinite} NaN/Inf samples, {self.limited} samples "
            "limited)"
        )


class Worker:
    """Loads the model once; renders each job from a fresh copy of it (a rack's nodes are
    loaded for each job)."""

    def __init__(self, recipe: Recipe) -> None:
        import torch

        from ..passes.convolution import retune

        torch.set_num_threads(recipe.threads)
        retune(recipe.retune)
        self.recipe = recipe
        self.play = recipe.playing()
        self.model = None if self.play.rack is not None else self.play.load()
        if self.model is not None:  # a .ts loaded again per file is measured once
            self.play = replace(self.play, latency=self.model.latency)

    def _fresh_model(self) -> Any:
        """A copy of the loaded model no file has played. A TorchScript module is loaded
        again instead: a copy of it gets weights of its own that the bending (versions,
        weight ops) does not reach."""
        return self.play.load() if self.model.bended.scripted else copy.deepcopy(self.model)

    def render(
        self,
        job: Job,
        plan: list,
        into: Path | None = None,
        chosen: Callable[[list], None] = lambda plan: None,
    ) -> Done:
        """Render ``job`` with the convolution forms ``plan`` (those it lacks are timed) into
        ``into`` (default: the job's pending file, which the driver puts in place); ``chosen``
        is given the forms once the engine is made, before the file is rendered."""
        import torch

        from ..passes.convolution import form_plan
        from .frames import source_info

        began = time.time()
        torch.manual_seed(self.recipe.seed)  # what a model draws: the same in any process
        recipe = self.recipe
        engine = self._engine(1 if recipe.mono else source_info(Path(job.source)).channels, plan)
        chosen(form_plan())
        rendered = render_file(
            engine,
            Path(job.source),
            pending(job.target) if into is None else into,
            list(job.events),
            force=True,  # the driver decided what may be replaced
            resample=recipe.resample,
            mono=recipe.mono,
            sample_rate=recipe.sample_rate,
            keep_latency=recipe.keep_latency,
        )
        stats = engine.stats_dict()
        return Done(
            job.target,
            rendered.seconds,
            engine.out_channels,
            int(stats["blocks"]),
            engine.block,
            stats["p50_ms"],
            stats["max_ms"],
            int(stats["errors"]),
            rendered.nonfinite,
            rendered.limited,
            os.getpid(),
            began,
            time.time(),
            form_plan(),
        )

    def forms(self, channels: int, plan: list) -> list:
        """The convolution forms an engine for files of ``channels`` chooses (adopting
        ``plan``'s): what a Ray run hands every actor before they render."""
        from ..passes.convolution import form_plan

        self._engine(channels, plan)
        return form_plan()

    def _engine(self, channels: int, plan: list) -> Any:
        """An engine over a fresh model for files of ``channels``, with the forms ``plan``
        (those it lacks are timed)."""
        from ..passes.convolution import use_form_plan

        use_form_plan(plan)
        if self.model is None:  # a rack: render_file makes one stream per channel of the file
            return self.play.build()[0]
        return self.play.build(channels, self._fresh_model())[0]

    def render_bytes(self, job: Job, plan: list, data: bytes) -> tuple[Done, bytes]:
        """Render an input sent as bytes into a local temporary folder; the output's bytes
        (Ray: the driver writes the file)."""
        with tempfile.TemporaryDirectory(prefix="bendserver-") as folder:
            source = Path(folder) / f"in{Path(job.source).suffix}"
            target = Path(folder) / f"out{Path(job.target).suffix}"
            source.write_bytes(data)
            local = Job(str(source), job.target, job.events, job.settings)
            done = self.render(local, plan, target)
            return done, target.read_bytes()


def pending(target: str | os.PathLike) -> Path:
    """Where a worker writes a file (hidden, beside it) for the driver to put in place once it
    has it: a file completed in the moment a run is interrupted is not left unrecorded."""
    target = Path(target)
    return target.with_name(f".{target.stem}.bendserver-pending{target.suffix}")


# -- the manifest ------------------------------------------------------------------------------


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _digest_if_file(value: str | None) -> str | None:
    return file_digest(value) if value is not None and Path(value).is_file() else None


def made_by(recipe: dict[str, Any], job: Job) -> dict[str, Any]:
    """What makes ``job``'s file: the recipe, the input's digest, the score and the cell."""
    events = [[e.time, e.address, list(e.args)] for e in job.events]
    made = {
        "recipe": recipe,
        "input": {"name": Path(job.source).name, "sha256": file_digest(job.source)},
        "events": events,
        "settings": dict(job.settings),
    }
    return json.loads(json.dumps(made))  # as the manifest reads it back


class Manifest:
    """The output folder's record of what made each file (and the digest of the file it made),
    and the convolution forms used (with their digest: a manifest edited by hand is refused)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / MANIFEST
        self.files: dict[str, Any] = {}
        self.plan: list = []
        if self.path.is_file():
            try:
                data = read_json(self.path, "render manifest")
                self.files, self.plan = dict(data["files"]), list(data["forms"])
                edited = data["forms_sha256"] != _digest(self.plan)
            except (BendingError, KeyError, TypeError, ValueError):
                raise BendingError(
                    f"{self.path} is not a render manifest bendserver can read: remove it "
                    "(the files are then rendered again)"
                ) from None
            if edited:
                raise BendingError(
                    f"{self.path}: its convolution forms were edited since bendserver wrote them: "
                    "remove it (the files are then rendered again)"
                )
            _check_forms(self.plan, self.path)

    def made(self, target: Path, what: dict[str, Any]) -> bool:
        """Whether ``target`` was made by ``what`` and is the file it made (its digest)."""
        recorded = dict(self.files.get(target.name) or {})
        digest = recorded.pop(OUTPUT_DIGEST, None)
        return recorded == what and target.is_file() and file_digest(target) == digest

    def changed(self, target: Path) -> bool:
        """Whether ``target`` is a file this manifest recorded that is no longer the one made."""
        digest = (self.files.get(target.name) or {}).get(OUTPUT_DIGEST)
        return digest is not None and target.is_file() and file_digest(target) != digest

    def record(self, target: Path, what: dict[str, Any]) -> None:
        self.files[target.name] = {**what, OUTPUT_DIGEST: file_digest(target)}
        self.save()

    def save(self) -> None:
        data = {"format": "bendserver.render", "version": 2, "forms": self.plan}
        data["forms_sha256"] = _digest(self.plan)
        write_text(self.path, json.dumps({**data, "files": self.files}, indent=1) + "\n")


#: Where a manifest's record of a file keeps the digest of the file made.
OUTPUT_DIGEST = "output_sha256"


def _digest(value: Any) -> str:
    """SHA-256 of a JSON value as the manifest writes it."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _check_forms(plan: list, path: Path) -> None:
    """Refuse a manifest's convolution forms that name no form, or one that cannot compute its
    convolution (:mod:`bendserver.passes.convolution`: a transposed one's own, a stride only
    where a form takes it, none for a one-tap kernel of stride 1 but the strided ones)."""
    from ..passes.convolution import FORMS, STRIDED, TRANSPOSED_FORMS

    for entry in plan:
        try:
            (x_shape, weight_shape, _, dilation, _, *kind), name = entry
            stride, transposed = kind or (1, False)
            taps = weight_shape[-1]
            assert all(type(n) is int for n in (*x_shape, *weight_shape, dilation, stride))
        except (AssertionError, IndexError, TypeError, ValueError):
            raise BendingError(
                f"{path}: {json.dumps(entry)[:200]} is no convolution's form: remove the manifest "
                "(the files are then rendered again)"
            ) from None
        if transposed:
            fits = name in TRANSPOSED_FORMS
        else:
            form = FORMS.get(name)
            fits = form is not None and (form in STRIDED or (stride == 1 and taps != 1))
        if name is not None and not fits:
            raise BendingError(
                f"{path}: the form {str(name)[:40]!r} cannot compute the convolution of input "
                f"{x_shape} and weight {weight_shape} (stride {stride}): remove the manifest "
                "(the files are then rendered again)"
            )


# -- running ------------------------------------------------------------------------------------


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
