"""StreamEngine: a bended model run block by block, with control changes between blocks.

The engine traces the model's method once for its fixed block shape and calls the bended graph
module directly. Control methods (``set_param``, ``add_op``, ``set_interpolation``, ...) may be
called from any thread: they validate, compute what is heavy (weight tensors, a rebuilt graph)
on the calling thread, and submit a cheap command that :meth:`process` applies at the start of
the next block, or of the first block starting at or after ``at`` (in samples).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..bending.base import BendingOp
from ..bending.config import BendingConfig
from ..errors import BendingError
from ..loader import LoadedModel, load_model
from ..presets import Preset, load_preset
from .commands import CommandQueue, Ramp
from .fuse import OutputFuse
from .stats import EngineStats

log = logging.getLogger("bendserver.engine")


class StreamEngine:
    """Runs ``model.<method>`` on blocks of ``block`` audio frames.

    ``process(block)`` takes and returns float32 arrays ``[channels, frames]``. For methods with
    other rates (``encode``: audio in, latent out), frames are scaled by the method's ratios.
    """

    def __init__(
        self,
        model: str | Path | torch.nn.Module | LoadedModel,
        method: str = "forward",
        block: int | None = None,
        sample_rate: int | None = None,
        device: str = "cpu",
        preset: str | Path | None = None,
        fuse: bool = True,
        ceiling: float = 0.99,
        threads: int | None = 1,
    ) -> None:
        if threads is not None:
            torch.set_num_threads(threads)
        self.model = load_model(model, device)
        self.bended = self.model.bended
        self.method = method
        self.spec = self.model.method(method)
        self.block = int(block or self.model.block)
        self.sample_rate = int(sample_rate or self.model.sample_rate)
        self.device = torch.device(device)
        self._on_cpu = self.device.type == "cpu"
        self._check_block()
        self.in_frames = self.block // self.spec.in_ratio
        self.out_frames = self.block // self.spec.out_ratio
        self.in_channels, self.out_channels = self.spec.in_channels, self.spec.out_channels
        self.latency = self.model.latency

        self._control = threading.RLock()
        self.commands = CommandQueue()
        self.ops: dict[str, BendingOp] = {}
        self.bank = self.bended.weight_bank
        self.bank.deferred = True
        self._trace()
        self._ramps: dict[tuple[int, str], Ramp] = {}
        self.gain, self.mix, self.bypass = 1.0, 1.0, False
        self._applied_gain, self._applied_mix = 1.0, 1.0
        self.fuse = OutputFuse(self.out_channels, self.sample_rate, ceiling) if fuse else None
        self.stats = EngineStats()
        self.time = 0
        self._budget = self.block / self.sample_rate
        self._logged: set[str] = set()
        if preset is not None:
            self.load_preset(preset)
            self._apply_due()

    def _check_block(self) -> None:
        for ratio in (self.spec.in_ratio, self.spec.out_ratio):
            if self.block % ratio:
                raise BendingError(
                    f"block {self.block} is not a multiple of {self.method}'s ratio {ratio}"
                )
        tensors = [*self.model.module.parameters(), *self.model.module.buffers()]
        if tensors and tensors[0].device != self.device:
            raise BendingError(
                f"the model is on {tensors[0].device}, not {self.device}: "
                "load it on the engine's device"
            )

    def _trace(self) -> None:
        argument = next(iter(self.bended.argument_names(self.method)))
        example = torch.zeros(1, self.in_channels, self.in_frames, device=self.device)
        self.bended.trace(self.method, **{argument: example})
        self._forward: Callable[..., Any] = self.bended.compiled(self.method).forward
        self._initial_state = [(b, b.detach().clone()) for b in self.model.module.buffers()]

    # -- the audio side ----------------------------------------------------------------------

    def process(self, block: np.ndarray) -> np.ndarray:
        """Apply due commands, run one block, mix, fuse. Never raises on a model error."""
        started = time.perf_counter()
        self._apply_due()
        if block.shape != (self.in_channels, self.in_frames):
            raise BendingError(
                f"process() takes [{self.in_channels}, {self.in_frames}] frames, "
                f"got {list(block.shape)}"
            )
        dry = np.asarray(block, dtype=np.float32)
        out = self._run(dry)
        out = self._mix_and_gain(dry, out)
        if self.fuse is not None:
            out = self.fuse.process(out)
        self.time += self.block
        self.stats.record(time.perf_counter() - started, self._budget)
        return out

    def _run(self, dry: np.ndarray) -> np.ndarray:
        if self.bypass:
            return self._dry_or_silence(dry)
        try:
            with torch.inference_mode():
                x = torch.from_numpy(dry)[None]
                y = self._forward(x if self._on_cpu else x.to(self.device))[0]
                if not self._on_cpu or y.dtype != torch.float32:
                    y = y.to("cpu", torch.float32)
                return y.numpy()
        except Exception as error:  # a bended model may fail: the stream must not
            self.stats.errors += 1
            kind = type(error).__name__
            if kind not in self._logged:
                self._logged.add(kind)
                log.error("model call failed (%s: %s); outputting dry/silence", kind, error)
            return self._dry_or_silence(dry)

    def _dry_or_silence(self, dry: np.ndarray) -> np.ndarray:
        if dry.shape == (self.out_channels, self.out_frames):
            return dry.copy()
        return np.zeros((self.out_channels, self.out_frames), dtype=np.float32)

    def _mix_and_gain(self, dry: np.ndarray, wet: np.ndarray) -> np.ndarray:
        """Dry/wet mix and output gain, each moved linearly across the block when it changes."""
        mix = self._smoothed(self._applied_mix, self.mix)
        gain = self._smoothed(self._applied_gain, self.gain)
        self._applied_mix, self._applied_gain = self.mix, self.gain
        if dry.shape == wet.shape and not (np.isscalar(mix) and mix == 1.0):
            wet = dry + (wet - dry) * mix
        return wet * gain if not (np.isscalar(gain) and gain == 1.0) else wet

    def _smoothed(self, old: float, new: float) -> float | np.ndarray:
        if old == new:
            return new
        return np.linspace(old, new, self.out_frames, endpoint=True, dtype=np.float32)

    def _apply_due(self) -> None:
        for command in self.commands.due(self.time):
            try:
                command.apply()
                self.commands.applied += 1
            except Exception as error:  # a command must never stop the stream
                self.stats.errors += 1
                log.error("command %r failed: %s", command.what, error)
        finished = [key for key, ramp in self._ramps.items() if not ramp.advance()]
        for key in finished:
            del self._ramps[key]

    def reset_state(self) -> None:
        """Clear the streaming state (caches) and the fuse's filter, right now."""
        with torch.no_grad():
            for buffer, initial in self._initial_state:
                buffer.copy_(initial)
        if self.fuse is not None:
            self.fuse.reset()

    # -- the control side --------------------------------------------------------------------

    def samples(self, seconds: float) -> int:
        return int(round(seconds * self.sample_rate))

    def op(self, op_id: str) -> BendingOp:
        try:
            return self.ops[op_id]
        except KeyError:
            raise BendingError(f"no op '{op_id}'; ops are {sorted(self.ops)}") from None

    def set_param(
        self, op_id: str, name: str, value: float, ramp_ms: float = 0.0, at: int | None = None
    ) -> None:
        """Set an op parameter, moving there over ``ramp_ms`` (one step per block at least).

        Weight targets are recomputed on the calling thread with the new value and swapped in
        at the block boundary (weights jump: only activation parameters ramp)."""
        op = self.op(op_id)
        value = op.param(name).validate(op_id, value)
        if not math.isfinite(ramp_ms) or ramp_ms < 0:
            raise BendingError(f"ramp must be a finite number of ms >= 0, got {ramp_ms!r}")
        with self._control:
            weights = self.bank.targets(op)
            prepared = {}
            if weights:
                with op.overridden(name, value):
                    prepared = self.bank.prepare(weights)
        tensor = op.value_tensor(name)
        blocks = math.ceil(ramp_ms * self.sample_rate / 1000 / self.block)

        def apply() -> None:
            self.bank.commit(prepared)
            if blocks > 0:
                self._ramps[(id(op), name)] = Ramp(tensor, value, blocks)
            else:
                self._ramps.pop((id(op), name), None)
                tensor.fill_(value)
            op.revision += 1

        self.commands.submit(apply, at, f"set {op_id}.{name}")

    def add_op(self, op_id: str, op: BendingOp, *keys: str, at: int | None = None) -> None:
        """Bend ``keys`` with ``op`` under the name ``op_id``; the graph is rebuilt here and
        swapped in at a block boundary, keeping the streaming state."""
        if not op_id.isidentifier():
            raise BendingError(f"op ids are identifiers (letters, digits, _), got {op_id!r}")
        with self._control:
            if op_id in self.ops:
                raise BendingError(f"an op named '{op_id}' exists; remove it first")
            self.bended.bend(op, *keys)
            self.ops[op_id] = op
            self._submit_rebuild(at, f"add {op_id}")

    def remove_op(self, op_id: str, at: int | None = None) -> None:
        with self._control:
            op = self.op(op_id)
            self.bended.unbend(op)
            del self.ops[op_id]
            self._submit_rebuild(at, f"remove {op_id}")

    def clear_ops(self, at: int | None = None) -> None:
        with self._control:
            for op in self.ops.values():
                self.bended.unbend(op)
            self.ops.clear()
            self._submit_rebuild(at, "clear")

    def enable_op(self, op_id: str, enabled: bool, at: int | None = None) -> None:
        """Switch an op on or off (off: it passes its input through)."""
        op = self.op(op_id)
        enabled = bool(enabled)
        with self._control:
            targets = self.bank.targets(op)
            prepared = self.bank.prepare(targets, enabled={id(op): enabled}) if targets else {}

        def apply() -> None:
            op.enabled = enabled
            self.bank.commit(prepared)

        self.commands.submit(apply, at, f"enable {op_id}")

    def set_interpolation(self, mix: Mapping[str, float] | None, at: int | None = None) -> None:
        """Use a normalised mix of weight versions (``None``: the selected version alone)."""
        with self._control:
            self.bank.set_mix(mix)
            self._submit_weights(at, "interpolation")

    def set_version(self, name: str | None, at: int | None = None) -> None:
        with self._control:
            self.bank.mix = None
            self.bank.select(name)
            self._submit_weights(at, f"version {name}")

    def set_gain(self, gain: float, at: int | None = None) -> None:
        gain = _finite("gain", gain, 0.0, 16.0)
        self.commands.submit(lambda: setattr(self, "gain", gain), at, "gain")

    def set_mix(self, mix: float, at: int | None = None) -> None:
        mix = _finite("mix", mix, 0.0, 1.0)
        self.commands.submit(lambda: setattr(self, "mix", mix), at, "mix")

    def set_bypass(self, bypass: bool, at: int | None = None) -> None:
        self.commands.submit(lambda: setattr(self, "bypass", bool(bypass)), at, "bypass")

    def request_reset(self, at: int | None = None) -> None:
        """Clear the streaming state at a block boundary."""
        self.commands.submit(self.reset_state, at, "reset")

    def load_preset(self, preset: str | Path | Preset, at: int | None = None) -> Preset:
        """Replace the ops, weights and engine settings with a preset's."""
        preset = preset if isinstance(preset, Preset) else load_preset(preset)
        with self._control:
            for op in self.ops.values():
                self.bended.unbend(op)
            self.ops.clear()
            config = BendingConfig.from_dict(preset.config, module=self.bended)
            for op_id, op in config.ops.items():
                keys = [k for o, ks in config.entries if o is op for k in ks]
                self.bended.bend(op, *keys)
                self.ops[op_id] = op
            self.bank.mix = None
            self.bank.select(preset.version)
            if preset.interpolation:
                self.bank.set_mix(preset.interpolation)
            self._submit_rebuild(at, f"preset {preset.name}")
        self.set_gain(preset.gain, at)
        self.set_mix(preset.mix, at)
        return preset

    def bending_config(self) -> BendingConfig:
        """The current bends, with the engine's op ids."""
        config = self.bended.bending_config()
        config.names = dict(self.ops)
        return config

    def _submit_weights(self, at: int | None, what: str) -> None:
        prepared = self.bank.take_pending()
        self.commands.submit(lambda: self.bank.commit(prepared), at, what)

    def _submit_rebuild(self, at: int | None, what: str) -> None:
        prepared = self.bank.take_pending()
        forward = self.bended.compiled(self.method).forward

        def apply() -> None:
            self.bank.commit(prepared)
            self._forward = forward

        self.commands.submit(apply, at, what)

    # -- reporting ---------------------------------------------------------------------------

    def stats_dict(self) -> dict[str, float]:
        stats = {
            "blocks": self.stats.blocks,
            "late": self.stats.late,
            "errors": self.stats.errors,
            **self.stats.compute_ms(),
            "nan": self.fuse.nonfinite_samples if self.fuse else 0,
            "limited": self.fuse.limited_blocks if self.fuse else 0,
            "commands": self.commands.applied,
            "pending": self.commands.pending(),
        }
        return stats


def _finite(name: str, value: Any, low: float, high: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BendingError(f"{name} takes a number, got {value!r}") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise BendingError(f"{name} must be in [{low}, {high}], got {value!r}")
    return number
