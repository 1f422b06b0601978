"""What a render of many files is made of, and the worker that renders them.

A :class:`Recipe` makes every file of a run but its input and score; a :class:`Job` is one file.
Each :class:`Worker` loads the model once and renders every file it is given from a fresh copy
of it (a TorchScript model is loaded again: its copy would not be the one the bending reaches),
so the streaming state a file leaves in a model's buffers never reaches the next file, with
torch's random seed set to the run's (a model that draws noise, RAVE's encoder, draws the same
for a file in any process, whatever came before), one torch thread each, through
:func:`.render.render_file`. It writes a hidden pending file beside the output, which the
driver (:mod:`.batch`) puts in place; on Ray it renders bytes it is sent into bytes it sends back.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..play import PlayOptions
from ..rackspec import RackSpec
from .manifest import file_digest
from .offline import ScoreEvent, render_file


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


def _digest_if_file(value: str | None) -> str | None:
    return file_digest(value) if value is not None and Path(value).is_file() else None
