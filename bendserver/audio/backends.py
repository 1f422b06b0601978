"""Audio backends: a PortAudio stream (sounddevice), or a null backend clocked in real time.

Both call an :class:`AudioCallback` with sounddevice's signature; both are started and stopped
the same way. The null backend is for machines without a sound card: a thread calls the callback
every block period against the monotonic clock, so the engine runs, is timed and can be
controlled exactly as live, only nothing is heard.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import BendingError
from ..threads import LoopThread
from .devices import Device, devices, find_device, portaudio, release
from .priority import AUDIO_WORKER, set_realtime


class Callback(Protocol):
    def __call__(
        self, indata: np.ndarray | None, outdata: np.ndarray, frames: int, info: Any, status: Any
    ) -> None: ...


class Backend(Protocol):
    name: str
    block: int

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass
class NullStatus:
    """The null backend's callback status: an output underflow when a period was missed."""

    output_underflow: bool = False

    def __bool__(self) -> bool:
        return self.output_underflow


class NullBackend(LoopThread):
    """Calls the callback every ``block / sample_rate`` seconds; nothing is played."""

    latency = 0  #: frames held between the callback and the (absent) device

    def __init__(self, callback: Callback, sample_rate: int, block: int, channels: int) -> None:
        self.callback = callback
        self.block = block
        self.period = block / sample_rate
        self.name = "null (no sound card: a real-time clock, nothing is heard)"
        self._out = np.zeros((block, channels), dtype=np.float32)
        super().__init__("audio-null")

    def _run(self) -> None:
        set_realtime(AUDIO_WORKER)  # an audio thread, as PortAudio's would be
        status = NullStatus()
        deadline = time.monotonic()
        while not self._stop.is_set():
            self.callback(None, self._out, self.block, None, status)
            deadline += self.period
            now = time.monotonic()
            status = NullStatus()
            if now > deadline + self.period:  # a period was missed: start again from now
                status.output_underflow = True
                deadline = now
            elif now < deadline:
                time.sleep(deadline - now)


class DeviceBackend:
    """A PortAudio output stream (or a duplex stream when ``input_name`` is given)."""

    def __init__(
        self,
        callback: Callback,
        output_name: str | None,
        sample_rate: int,
        block: int,
        in_channels: int,
        out_channels: int,
        input_name: str | None = None,
        output_channels: int | None = None,
    ) -> None:
        sd = portaudio()
        try:
            self.output: Device = find_device(sd, output_name, "output")
            self.input: Device | None = None
            if input_name is not None:
                self.input = find_device(sd, input_name, "input")
            #: Channels opened on the device: a mono model plays on every one of them.
            self.channels = playback_channels(out_channels, self.output.outputs, output_channels)
            own = self._own_latency(sd, sample_rate, in_channels)
            self.stream = self._open(sd, callback, sample_rate, block, in_channels, self.channels)
            #: Frames PortAudio's stream holds between the callback and the device beyond the
            #: device's own latency (at the stream's rate, the model's): what this path adds.
            held = 0.0 if own is None else _total(self.stream.latency) - own
            self.latency = max(0, round(sample_rate * held))
        except BendingError:
            release()
            raise
        except sd.PortAudioError as error:
            release()
            raise BendingError(
                f"cannot open {self.output} at {sample_rate} Hz, block {block}: {error}. "
                "Check the device's sample rate (a JACK server's is fixed with -r) or use "
                "--audio null"
            ) from None
        self.block = block
        self.name = str(self.output) if self.input is None else f"{self.input} -> {self.output}"

    def _open(self, sd: Any, callback: Callback, rate: int, block: int, ins: int, outs: int) -> Any:
        common = dict(samplerate=rate, blocksize=block, dtype="float32", latency="low")
        if self.input is None:

            def output_only(outdata: np.ndarray, frames: int, info: Any, status: Any) -> None:
                callback(None, outdata, frames, info, status)

            return sd.OutputStream(
                device=self.output.index, channels=outs, callback=output_only, **common
            )
        return sd.Stream(
            device=(self.input.index, self.output.index),
            channels=(ins, outs),
            callback=callback,
            **common,
        )

    def _own_latency(self, sd: Any, rate: int, ins: int) -> float | None:
        """The seconds (input + output) PortAudio reports for the same stream with no fixed
        block: the device's own latency, which a fixed block may exceed (a JACK duplex stream
        holds one block more in PortAudio's buffer processor: an impulse took 128 frames more
        at block 128). Opened and closed before the stream itself (a device may take one
        stream at a time); None where it cannot be opened (nothing added is reported)."""
        try:
            probe = self._open(sd, lambda *args: None, rate, 0, ins, self.channels)
        except sd.PortAudioError:
            return None
        try:
            return _total(probe.latency)
        finally:
            probe.close()

    def start(self) -> None:
        self.stream.start()

    def stop(self) -> None:
        """Stop and close the stream, then terminate PortAudio."""
        try:
            self.stream.stop()
            self.stream.close()
        finally:
            release()


def _total(latency: float | tuple[float, float]) -> float:
    """A stream's input and output latency added up (an output stream has only the one)."""
    return sum(latency) if isinstance(latency, tuple) else latency


def playback_channels(model: int, device: int, asked: int | None = None) -> int:
    """How many device outputs to open: ``asked``, else every output of the device for a mono
    model (the same signal on each: both speakers), else the model's channels."""
    if asked is not None:
        if asked < 1 or (model != 1 and asked != model):
            raise BendingError(
                f"--output-channels {asked}: a mono model plays on any number of outputs, "
                f"a model of {model} channels on {model}"
            )
        return asked
    return max(device, 1) if model == 1 else model


def output_devices() -> list[Device] | None:
    """Every output device PortAudio finds, or None without PortAudio."""
    try:
        sd = portaudio()
    except BendingError:
        return None
    try:
        return [device for device in devices(sd) if device.outputs > 0]
    finally:
        release()


def has_default_output() -> bool:
    """Whether PortAudio has a default output device (a sound card, usually)."""
    try:
        sd = portaudio()
    except BendingError:
        return False
    try:
        find_device(sd, None, "output")
        return True
    except BendingError:
        return False
    finally:
        release()
