"""A node's audio side: one block processed, the changes due applied first.

The audio thread calls :meth:`NodeRunner.process` once a block (a rack calls ``apply_due`` and
``_run`` itself, to apply several nodes' changes at once). Everything it swaps in was prepared
on the control side (:mod:`bendserver.engine.changes`); what it replaces goes back in the change's
payload to be freed there.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from ..errors import BendingError
from .bends import Payload
from .output import mix_and_gain, ramped


class NodeRunner:
    """The audio side of a node. Its contract, kept by every method here:

    - it only applies what was prepared: pointer swaps, copies into captured tensors, scalar
      writes; it builds, traces and loads nothing, and takes no control lock;
    - it never logs, never frees: what a change replaces is appended to its payload and freed
      on the control side (``collect``);
    - it never lets an error out of a block: a failing model call or change is counted in
      ``stats.errors``, kept once per kind for ``failures()``, and the block plays dry (or
      silent). The one error it raises is a block of the wrong shape, a caller's bug, before
      anything runs.
    """

    def process(self, block: np.ndarray) -> np.ndarray:
        """Apply due changes, run one block, mix and gain. A block of another shape raises a
        BendingError; a failing model call outputs the dry signal (or silence) and counts."""
        self.apply_due()
        if block.shape != (self.in_channels, self.in_frames):
            raise BendingError(
                f"process() takes [{self.in_channels}, {self.in_frames}] frames, "
                f"got {list(block.shape)}"
            )
        dry = np.asarray(block, dtype=np.float32)
        out = self._mix_and_gain(dry, self._run(dry))
        self.time += self.block
        return out

    def _run(self, dry: np.ndarray) -> np.ndarray:
        if self.bypass:
            return self._dry_or_silence(dry)
        try:
            with torch.inference_mode():
                if self._transfer is not None:
                    return self._transfer.run(dry, self._forward)
                x = torch.from_numpy(dry).view(self.streams, -1, self.in_frames)
                y = self._forward(x if self._on_cpu else x.to(self.device))
                if not self._on_cpu or y.dtype != torch.float32:
                    y = y.to("cpu", torch.float32)
                return y.reshape(self.out_channels, self.out_frames).numpy()
        except Exception as error:  # a bended model may fail: the stream must not
            self.stats.errors += 1
            self._failed("model call", error)
            return self._dry_or_silence(dry)

    def _failed(self, what: str, error: Exception) -> None:
        """Keep the first failure of each kind for the control side to report."""
        kind = f"{what}: {type(error).__name__}"
        if kind not in self._failed_kinds:
            self._failed_kinds.add(kind)
            self._failures.append(f"{kind}: {error}")

    def _dry_or_silence(self, dry: np.ndarray) -> np.ndarray:
        if dry.shape == (self.out_channels, self.out_frames):
            return dry.copy()
        return np.zeros((self.out_channels, self.out_frames), dtype=np.float32)

    def _mix_and_gain(self, dry: np.ndarray, wet: np.ndarray) -> np.ndarray:
        """Dry/wet mix and output gain, each moved linearly across the block when it changes
        (from the stream's first block on: a preset's play at once, at any block size)."""
        if self.time == 0:
            self._applied_mix, self._applied_gain = self.mix, self.gain
        mix = ramped(self._applied_mix, self.mix, self.out_frames)
        gain = ramped(self._applied_gain, self.gain, self.out_frames)
        self._applied_mix, self._applied_gain = self.mix, self.gain
        return mix_and_gain(dry, wet, mix, gain)

    def apply_due(self) -> None:
        """Apply the changes due at this block and advance the ramps (audio side: the first
        step of :meth:`process`)."""
        modulated = self.modulated
        with self._on_device_stream():  # on a GPU: weight copies and parameter writes
            due = () if self.held else self.commands.due(self.time)
            if modulated is not None and (due or self._ramps):  # they move the own values
                modulated.restore(self)
            for command in due:
                if not command.cancelled:
                    try:
                        self._apply(command.payload)
                        self.commands.applied += 1
                    except Exception as error:  # a change must never stop the stream
                        self.stats.errors += 1
                        self._failed(f"change {command.what!r}", error)
            if due and self._transfer is not None:
                self._transfer.settle()  # the control side may then free what the copies read
            for command in due:
                self.commands.finish(command)
            finished = [key for key, ramp in self._ramps.items() if not ramp.advance()]
            if modulated is not None:
                modulated.drive(self)
        for key in finished:
            del self._ramps[key]

    def _apply(self, payload: Payload) -> None:
        """Swap a prepared change in (audio thread): pointer swaps and scalar writes only; a
        captured CUDA graph's weights are copied into instead, on the engine's stream."""
        current = self._current
        for name, tensor in payload.weights.items():
            if self.cuda_graphs is not None:
                current[name].copy_(tensor, non_blocking=True)
                payload.replaced.append(tensor)  # freed on the control side, once copied
                continue
            payload.replaced.append(current[name])  # keeps the old storage alive, to free later
            current[name] = tensor
            self._slots[name].data = tensor
        for op, enabled in payload.enabled:
            op.enabled = enabled
        for key, ramp in payload.ramps:
            if ramp.blocks > 0:
                ramp.begin()
                self._ramps[key] = ramp
            else:
                self._ramps.pop(key, None)
                ramp.tensor.fill_(ramp.target)
        for name, value in payload.settings.items():
            setattr(self, name, value)
        if payload.forward is not None:
            payload.replaced.append(self._forward)
            self._forward = payload.forward
        for name, values in payload.attributes.items():
            code = self.model.attributes[name].apply(self.model.module, values)
            if code < 0:
                raise BendingError(f"set_{name} returned {code}: the file refused the value")
        if payload.reset:
            self.reset_state()
            if self.on_reset is not None:
                self.on_reset()

    def _on_device_stream(self) -> contextlib.AbstractContextManager:
        """Device work queued on the stream the blocks run on (the CPU: nothing to do)."""
        return contextlib.nullcontext() if self._transfer is None else self._transfer.on_stream()

    def reset_state(self) -> None:
        """Clear the streaming state (caches), right now."""
        with torch.no_grad(), self._on_device_stream():
            for buffer, initial in self._initial_state:
                buffer.copy_(initial)
