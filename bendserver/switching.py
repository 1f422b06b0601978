"""``/model/load``: another model loaded, checked and warmed up on the control side, then swapped
in live through the server's :class:`~bendserver.engine.switch.EngineSlot`.

The steps, each on the control worker's thread (queries are answered between them): the file
is loaded and called once in a forked child first (:mod:`bendserver.probe`, unless
``--trust-model``), so a model that crashes, fails, or gives the wrong shape or NaN never enters
the server; then it is loaded here, traced and optimised into an engine for the block, rate and
channels that play, which must match; it plays a few blocks of the input the server played last
(its caches filled, its first block not slow), and must give finite values without errors; then
the slot crossfades to it at a block boundary, and the old engine, once replaced, is dropped
here. Any refusal leaves the old model playing and says why.
"""

from __future__ import annotations

import gc
import time
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .codegen import compile_aside
from .engine import StreamEngine
from .engine.switch import EngineSlot
from .errors import BendingError
from .midimap import Mapping
from .probe import probe_model
from .slices import breathe

#: Blocks of recent input the new engine plays before it is swapped in.
WARM_BLOCKS = 4
#: Seconds to wait for the crossfade beyond its own length (the audio may be stopped).
FADE_GRACE = 2.0

#: Builds an engine for a model and a preset name (None: the model's own), with the MIDI
#: mappings of that preset.
Builder = Callable[[str, "str | None"], "tuple[StreamEngine, list[Mapping]]"]


@dataclass
class Loaded:
    """What a switch did: the engine that plays, its preset's mappings, and what each step
    took (seconds; the probe's None when skipped)."""

    engine: StreamEngine
    mappings: list[Mapping]
    probe_s: float | None
    load_s: float
    warm_s: float
    swapped: bool  #: the crossfade finished while we waited


class ModelSwitcher:
    """Loads models into ``slot`` live. ``build`` makes an engine like the playing one for
    another model; ``search``: folders to find model names in; ``trust``: skip the probe;
    ``followers`` are told the new engine once it is handed to the slot."""

    def __init__(
        self,
        slot: EngineSlot,
        build: Builder,
        search: Iterable[str | Path] = (),
        trust: bool = False,
        followers: Iterable[Callable[[StreamEngine], None]] = (),
    ) -> None:
        self.slot = slot
        self.build = build
        self.search = list(search)
        self.trust = trust
        self.followers = list(followers)
        self.switches = 0  #: models swapped in
        compile_aside()  # a load's generated code compiled off the interpreter the audio needs

    def load(self, source: str, preset: str | None = None) -> Loaded:
        """Probe, load, check and warm up ``source`` (with ``preset``), swap it in and wait for
        the crossfade; a BendingError (the old model still playing) says why not."""
        self.slot.check_idle()
        if not source.strip():
            raise BendingError("/model/load takes a model: a name, a model folder or a .ts file")
        self._free()
        started = time.perf_counter()
        probed = not self.trust and probe_model(
            source, self.search, check=True, block=self.slot.block
        )
        probe_s = time.perf_counter() - started if probed else None
        breathe()
        loading = time.perf_counter()
        try:
            engine, mappings = self.build(source, preset)
        except BendingError:
            raise
        except Exception as error:  # the model's own code failed (a trusted model, unprobed)
            raise BendingError(
                f"model {source!r} failed to load: {type(error).__name__}: {error}"
            ) from None
        self._check_fit(engine, source)
        breathe()
        warming = time.perf_counter()
        self._warm_up(engine, source)
        warm_s = time.perf_counter() - warming
        self.slot.swap(engine)
        for follow in self.followers:
            follow(engine)
        self.switches += 1
        swapped = self._wait_for_fade()
        self._free()
        return Loaded(engine, mappings, probe_s, warming - loading, warm_s, swapped)

    def _check_fit(self, engine: StreamEngine, source: str) -> None:
        """Refuse an engine the running audio path cannot play, saying what it plays."""
        slot = self.slot
        if engine.spec.in_ratio != 1 or engine.spec.out_ratio != 1:
            raise BendingError(
                f"model {source!r}: '{engine.method}' is not audio to audio; the server plays "
                "audio methods"
            )
        if engine.sample_rate != slot.sample_rate:
            raise BendingError(
                f"model {source!r} runs at {engine.sample_rate} Hz; the server plays "
                f"{slot.sample_rate} Hz: serve it at its own rate (a server of its own)"
            )
        if (engine.in_channels, engine.out_channels) != (slot.in_channels, slot.out_channels):
            raise BendingError(
                f"model {source!r} plays {engine.in_channels} -> {engine.out_channels} "
                f"channels here; the server plays {slot.in_channels} -> {slot.out_channels}"
            )

    def _warm_up(self, engine: StreamEngine, source: str) -> None:
        """Play the last blocks the server played into ``engine`` (silence before any), and
        refuse it if it failed or gave values that are not finite."""
        block = self.slot.block
        recent = self.slot.recent
        dry, _, _ = recent.read(recent.written - WARM_BLOCKS * block)
        blocks = [dry[:, i * block : (i + 1) * block] for i in range(dry.shape[1] // block)]
        silence = np.zeros((engine.in_channels, block), dtype=np.float32)
        blocks = [silence] * (WARM_BLOCKS - len(blocks)) + blocks
        nonfinite = 0
        for chunk in blocks:
            out = engine.process(np.ascontiguousarray(chunk))
            nonfinite += int(np.count_nonzero(~np.isfinite(out)))
            breathe()
        if engine.fuse is not None:
            nonfinite += engine.fuse.nonfinite_samples
        failures = engine.failures()
        if failures or engine.stats.errors:
            raise BendingError(
                f"model {source!r} failed on the input playing: {'; '.join(failures)}"
            )
        if nonfinite:
            raise BendingError(
                f"model {source!r} gave {nonfinite} values that are not finite (NaN or "
                f"infinite) in {WARM_BLOCKS} blocks of the input playing"
            )

    def _wait_for_fade(self) -> bool:
        """Wait until the slot finished the crossfade (False: the audio did not get there)."""
        deadline = time.monotonic() + self.slot.fade_ms / 1000 + FADE_GRACE
        while self.slot.busy and time.monotonic() < deadline:
            time.sleep(0.002)
            breathe()
        return not self.slot.busy

    def _free(self) -> None:
        """Free the engines the slot replaced (control side)."""
        for engine in self.slot.take_retired():
            engine.collect()  # what its own changes replaced
            release(engine, self.slot.engine)


def release(engine: StreamEngine, keep: object) -> None:
    """Empty the storage of every tensor a replaced engine holds that ``keep`` (the engine that
    plays) does not. A server keeps what it loaded out of the collector (``gc.freeze``: a full
    collection holds the interpreter for a second), so the reference cycles of an engine (its
    graphs, bound methods) are never collected: its tensors, the bulk of its memory, are freed
    here, on the control side."""
    kept = {id(tensor) for tensor in _tensors(keep)}
    empty = torch.empty(0)
    with torch.no_grad():
        for tensor in _tensors(engine):
            if id(tensor) not in kept:
                tensor.data = empty


def _tensors(root: object) -> list[torch.Tensor]:
    """The tensors reachable from ``root`` through objects, containers and modules, not through
    classes, Python modules or functions (what every engine shares)."""
    seen: set[int] = set()
    found: list[torch.Tensor] = []
    stack = [root]
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, _SHARED):
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            found.append(item)
            continue
        stack.extend(gc.get_referents(item))
        if len(seen) % 4096 == 0:
            breathe()
    return found


#: What :func:`_tensors` does not walk through.
_SHARED = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.CodeType,
    types.FrameType,
    types.GeneratorType,
)
