"""Frames at a control rate over OSC: a live rack's features and latents out, frames in.

Each node whose method gives frames (features, a RAVE ``encode``, a latent edge of a rack)
streams them as ``/out/<node>/<method> f f ...`` (one float per channel, a stream's channels
after another's), frame by frame as the blocks are played, at most ``rate`` frames a second per
stream (a faster stream sends the frames that fall due, each the newest at its time). They go to
the clients that sent ``/out/subscribe [port]`` (at most :data:`MAX_SUBSCRIBERS`) and, where the
rack's own output is frames (``serve -m rave.ts:encode``), to the reply address. A rack whose
input is frames (``decode``) plays the frame last sent to ``/in/<node>/<method>``. The sender
runs on its own thread on the control side, reading the taps the audio side fills
(:mod:`bendserver.engine.frames`), and waits for the compute gate as the control worker does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..audio.gate import ComputeGate
from ..engine.frames import FrameTap, HeldFrame
from ..engine.rack import Rack
from ..errors import BendingError
from ..threads import LoopThread
from .replies import ReplySender

#: Frames a second each stream sends at most, by default.
FRAME_RATE = 100.0
#: Clients that may subscribe at once.
MAX_SUBSCRIBERS = 16


class FrameStreams(LoopThread):
    """Sends the frames of ``taps`` (node -> tap) of ``rack`` as OSC, holds the frame ``held``
    plays. The rack's output frames also go to ``reply_port`` of ``reply_host`` (None: this
    machine), which is also the port a subscriber gets by default."""

    def __init__(
        self,
        rack: Rack,
        taps: dict[str, FrameTap],
        held: HeldFrame | None,
        reply_port: int,
        reply_host: str | None = None,
        rate: float = FRAME_RATE,
    ) -> None:
        if not rate > 0:
            raise BendingError(f"--frame-rate is a number of frames a second above 0, got {rate}")
        self.rack, self.taps, self.held, self.rate = rack, taps, held, float(rate)
        self.reply_port = reply_port
        self.first = rack.order[0] if held is not None else None
        last = rack.order[-1] if rack.spec.out_ratio != 1 else None
        self.reply = (reply_host or "127.0.0.1", reply_port) if last is not None else None
        #: Each stream's address and ratio, by node.
        self.streams = {
            name: (f"/out/{name}/{rack.nodes[name].method}", rack.nodes[name].spec.out_ratio)
            for name in taps
        }
        self._last = last
        self._read = dict.fromkeys(taps, 0)
        self._due = dict.fromkeys(taps, 0.0)
        self.subscribers: list[tuple[str, int]] = []
        #: A sender for each place frames go (a subscriber's, the reply address).
        self._senders: dict[tuple[str, int], ReplySender] = {}
        self.sent = 0  #: frames sent
        self._admission: Any = None
        super().__init__("osc-frames")

    def use_gate(self, gate: ComputeGate) -> None:
        """Send between blocks: wait for ``gate`` as the control worker does."""
        self._admission = gate.admission()

    # -- the control side's requests (the control worker's thread) ------------------------

    def subscribe(self, host: str | None, port: int | None) -> list[str]:
        """Send every stream to ``host:port`` (None: this machine, the reply port) from now
        on; the streams' addresses."""
        target = (host or "127.0.0.1", int(port or self.reply_port))
        if target not in self.subscribers:
            if len(self.subscribers) >= MAX_SUBSCRIBERS:
                raise BendingError(
                    f"{MAX_SUBSCRIBERS} clients subscribe already: /out/unsubscribe one first"
                )
            self.subscribers = [*self.subscribers, target]
        return [address for address, _ in self.streams.values()]

    def unsubscribe(self, host: str | None, port: int | None) -> int:
        """Stop sending to ``host`` (None: this machine) on ``port`` (None: every port); how
        many were removed."""
        host = host or "127.0.0.1"
        kept = [s for s in self.subscribers if not (s[0] == host and port in (None, s[1]))]
        removed, self.subscribers = len(self.subscribers) - len(kept), kept
        return removed

    @property
    def failed(self) -> int:
        """Sends the system refused (no route, a full buffer), over every place."""
        return sum(sender.failed for sender in list(self._senders.values()))

    def hold(self, node: str, method: str, values: Sequence[float]) -> None:
        """Play ``values`` as the input frame of the rack's first node (``/in/...``)."""
        if self.held is None or node != self.first or method != self.rack.nodes[node].method:
            takes = f"/in/{self.first}/{self.rack.nodes[self.first].method}" if self.first else ""
            raise BendingError(
                f"/in/{node}/{method}: this server's input is "
                + (f"frames at {takes}" if takes else "audio (its first method takes audio)")
            )
        self.held.set(values)

    def describe(self) -> str:
        """What goes where, for the server's banner."""
        parts = []
        if self.streams:
            addresses = ", ".join(address for address, _ in self.streams.values())
            to = f"{self.reply[0]}:{self.reply[1]} and " if self.reply else ""
            parts.append(
                f"{addresses} to {to}clients that send /out/subscribe, at most "
                f"{self.rate:g} a second"
            )
        if self.first is not None:
            method = self.rack.nodes[self.first].method
            parts.append(f"in from /in/{self.first}/{method} ({self.held.channels} values)")
        return "; ".join(parts)

    # -- the sender --------------------------------------------------------------------------

    def _run(self) -> None:
        period = min(0.05, max(0.005, 0.5 / self.rate))
        while not self._stop.wait(period):
            targets = list(self.subscribers)
            for name in self.taps:
                reply = [self.reply] if name == self._last and self.reply not in targets else []
                self._send(name, targets + reply)

    def _send(self, name: str, targets: list[tuple[str, int]]) -> None:
        """Send the frames of node ``name`` that are due since the last look."""
        frames, first = self.taps[name].read(self._read[name])
        self._read[name] = first + frames.shape[1]
        address, ratio = self.streams[name]
        step = ratio / self.rack.sample_rate  # seconds between frames
        for index in range(frames.shape[1]):
            at = (first + index) * step
            if at + 1e-9 < self._due[name]:
                continue
            self._due[name] = max(self._due[name] + 1 / self.rate, at)
            if not targets:
                continue
            if self._admission is not None:
                self._admission.wait(0.05)
            values = frames[:, index].tolist()
            for target in targets:
                self._sender(target).send(target[0], address, values)
            self.sent += 1

    def _sender(self, target: tuple[str, int]) -> ReplySender:
        """The sender to ``(host, port)``, made on its first frame (sender thread)."""
        sender = self._senders.get(target)
        if sender is None:
            sender = self._senders[target] = ReplySender(target[1], target[0])
        return sender

    def stop(self, timeout: float = 10.0) -> None:
        super().stop(timeout)
        for sender in self._senders.values():
            sender.close()

    def recent(self, count: int = 64, channels: int = 16) -> dict[str, Any]:
        """The newest ``count`` frames of each stream (its first ``channels``), for the page's
        plot: ``{address: {"ratio": r, "frames": [[v, ...], ...]}}``."""
        shown: dict[str, Any] = {}
        for name, tap in self.taps.items():
            frames, _ = tap.read(max(0, tap.written - count))
            address, ratio = self.streams[name]
            rows = frames[:channels].T.round(4).tolist()
            shown[address] = {"ratio": ratio, "channels": tap.frames.shape[0], "frames": rows}
        return shown
