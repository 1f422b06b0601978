"""Rack: named nodes joined by edges, played together: one block loop, one fuse, one set of stats.

Edges run from ``in`` (the rack's input) through nodes to ``out`` (its output); without edges the
nodes form a chain in their order. A node (or ``out``) fed by several edges gets their sum, each
edge scaled by its gain and delayed so that every branch arrives as late as the latest one (the
nodes' measured latencies): parallel branches stay aligned to the sample. What an edge carries
(channels, audio or latent frames) is checked when the rack is made. Each node keeps its own
bending state and changes (:class:`~bendserver.engine.node.Node`); the rack owns what the nodes
share: the block loop and its time, the fuse, the meter's tap, the stats and failures, and the
latency (the longest path's sum).
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..audiofile import fit_length, resample_audio
from ..errors import BendingError
from ..loader import MethodSpec
from ..presets import Preset
from .fuse import OutputFuse
from .node import Node, _checked_streams
from .stats import EngineStats
from .switch import Layout, NodeSwap, RecentInput
from .tap import BlockTap

#: The rack's input and output, as ends of edges.
IN, OUT = "in", "out"


@dataclass(frozen=True)
class Edge:
    """``source``'s output into ``target``'s input (``in``/``out``: the rack's), times ``gain``."""

    source: str
    target: str
    gain: float = 1.0


class Delay:
    """A fixed delay of ``frames`` frames on blocks of ``[channels, block]`` (audio side: no
    allocation beyond the block it returns)."""

    def __init__(self, channels: int, frames: int, block: int) -> None:
        self.frames = frames
        self._line = np.zeros((channels, frames + block), dtype=np.float32)

    def process(self, x: np.ndarray) -> np.ndarray:
        line, frames = self._line, self.frames
        line[:, frames:] = x
        out = line[:, : x.shape[-1]].copy()
        line[:, :frames] = line[:, x.shape[-1] :]
        return out

    def reset(self) -> None:
        self._line.fill(0.0)

    def carry(self, other: Delay) -> None:
        """Take the newest history ``other`` holds (as much as this line delays by): a branch
        realigned to another delay goes on with what it had (audio side, no allocation)."""
        count = min(self.frames, other.frames)
        if count and self._line.shape[0] == other._line.shape[0]:
            self._line[:, self.frames - count : self.frames] = other._line[
                :, other.frames - count : other.frames
            ]


@dataclass
class Input:
    """One edge as its target reads it: from which output, delayed, scaled."""

    source: str
    gain: float
    delay: Delay | None


class Rack:
    """Plays named ``nodes`` joined by ``edges`` (None: a chain in the nodes' order) on blocks
    of ``[channels, frames]`` float32 audio.

    The output fuse (``fuse``, limiting towards ``ceiling``) works on audio outputs only
    (latent frames are not limited nor DC-blocked).
    """

    def __init__(
        self,
        nodes: Mapping[str, Node],
        edges: Sequence[Edge] | None = None,
        fuse: bool = True,
        ceiling: float = 0.99,
    ) -> None:
        if not nodes:
            raise BendingError("a rack plays at least one node")
        if edges is None:
            ends = [IN, *nodes, OUT]
            edges = [Edge(a, b) for a, b in zip(ends, ends[1:], strict=False)]
        self.stats = EngineStats()
        self._take(self._layout(dict(nodes), list(edges)))
        for node in self.nodes.values():
            node.stats = self.stats
            node.on_reset = self._reset_fuse
        #: Copies of each block in and out for a meter (None: no copies; see ``engine.tap``).
        self.tap: BlockTap | None = None
        #: Copies of the frames of nodes giving frames, by node (see :mod:`.frames`).
        self.frame_taps: dict[str, Any] = {}
        self.fuse = (
            OutputFuse(self.out_channels, self.sample_rate, ceiling)
            if fuse and self.spec.out_ratio == 1
            else None
        )
        self.time = 0
        self._budget = self.block / self.sample_rate
        #: Nodes that played and were replaced by :meth:`swap`, for the control side to free.
        self.retired: collections.deque[Node] = collections.deque()
        self.swaps = 0  #: node swaps finished
        #: The rack time (samples) of the block the last swap's crossfade started at.
        self.swapped_at: int | None = None
        self._incoming: NodeSwap | None = None
        self._fading: NodeSwap | None = None
        #: The rack's modulators (:mod:`bendserver.modulation`; None: none were added).
        self.modulation: Any = None

    def _layout(self, nodes: dict[str, Node], edges: list[Edge]) -> Layout:
        """What the rack plays with ``nodes`` joined by ``edges``: checked, ordered, each
        target's inputs with the delays that align its branches, the latency at each node's
        output (the longest path to it). Nothing of the rack changes (control side)."""
        order = _ordered(list(nodes), edges)
        _check_edges(nodes, edges)
        first = next(iter(nodes.values()))
        arrival: dict[str, int] = {IN: 0}
        inputs: dict[str, list[Input]] = {}
        for target in [*order, OUT]:
            into = _into(edges, target)
            latest = max(arrival[edge.source] for edge in into)
            channels, ratio = _carried(nodes, edges, into[0].source)
            inputs[target] = []
            for edge in into:
                lag = latest - arrival[edge.source]
                if lag % ratio:
                    raise BendingError(
                        f"the branches into '{target}' differ by {lag} samples, not a whole "
                        f"number of its frames ({ratio} samples each): they cannot be aligned"
                    )
                delay = (
                    Delay(channels * first.streams, lag // ratio, first.block // ratio)
                    if lag
                    else None
                )
                inputs[target].append(Input(edge.source, float(edge.gain), delay))
            if target != OUT:
                arrival[target] = latest + nodes[target].latency
        latency = max(arrival[edge.source] for edge in _into(edges, OUT))
        recent = {
            name: RecentInput(node.in_channels, node.in_frames) for name, node in nodes.items()
        }
        return Layout(nodes, edges, order, inputs, latency, recent)

    def _take(self, layout: Layout) -> None:
        """Play ``layout`` from now on: reference writes (on the audio side, at a swap's end)."""
        self.nodes, self.edges, self.order = layout.nodes, layout.edges, layout.order
        self._inputs, self.recent = layout.inputs, layout.recent
        #: Samples from a sample in to its effect out: the sum along the longest path.
        self.latency = layout.latency

    def inputs(self, target: str) -> list[Input]:
        """What ``target`` (a node or ``out``) sums, edge by edge: its source, gain and delay
        line (None: not delayed), the branches aligned."""
        return list(self._inputs[target])

    def __getattr__(self, name: str) -> Any:
        """A node's method or attribute asked of the rack (``/bend/...``, ``/attr/...`` sent to
        the rack, not to one of its nodes): a one-node rack's is its node's, however the node
        was named (``-m file.ts:method``); a rack of several refuses, naming the nodes."""
        if name.startswith("_") or "nodes" not in self.__dict__:
            raise AttributeError(name)
        if len(self.nodes) == 1:
            return getattr(self._first, name)
        raise BendingError(
            f"this rack plays several nodes ({self.names}): send this to one of them, /<node>/..."
        )

    # -- what the rack plays -------------------------------------------------------------------

    @property
    def names(self) -> str:
        """The nodes' names in playing order, as ``/list nodes`` gives them and messages say."""
        return ", ".join(self.order)

    @property
    def _first(self) -> Node:
        return next(iter(self.nodes.values()))

    @property
    def block(self) -> int:
        return self._first.block

    @property
    def sample_rate(self) -> int:
        return self._first.sample_rate

    @property
    def spec(self) -> MethodSpec:
        """Channels and ratios of the rack as one method: what ``in`` feeds, what ``out`` gets."""
        in_channels, in_ratio = _carried(self.nodes, self.edges, IN)
        out_channels, out_ratio = _carried(self.nodes, self.edges, _into(self.edges, OUT)[0].source)
        return MethodSpec(in_channels, in_ratio, out_channels, out_ratio)

    @property
    def method(self) -> str:
        """The nodes' methods, in order (one node: its method)."""
        if len(self.nodes) == 1:
            return self._first.method
        return " -> ".join(f"{name} ({self.nodes[name].method})" for name in self.order)

    @property
    def in_channels(self) -> int:
        return self.spec.in_channels * self.streams

    @property
    def in_frames(self) -> int:
        return self.block // self.spec.in_ratio

    @property
    def out_channels(self) -> int:
        return self.spec.out_channels * self.streams

    @property
    def out_frames(self) -> int:
        return self.block // self.spec.out_ratio

    @property
    def streams(self) -> int:
        return self._first.streams

    @property
    def adapts(self) -> bool:
        """Made without ``streams``: the batch follows the channels ``engine(audio, sr)`` gets."""
        return all(node.adapts for node in self.nodes.values())

    def samples(self, seconds: float) -> int:
        return int(round(seconds * self.sample_rate))

    def set_streams(self, streams: int) -> None:
        """Play ``streams`` streams from the next block on (see :meth:`Node.set_streams`);
        another count than now starts from a clear streaming state and fuse."""
        streams = _checked_streams(streams)
        if streams == self.streams:
            return
        self.check_idle()
        done: list[tuple[Node, int]] = []
        try:
            for node in self.nodes.values():
                before = node.streams
                node.set_streams(streams)
                done.append((node, before))
        except BaseException:
            for node, before in reversed(done):  # what was rebuilt plays what it did
                node.set_streams(before)
            raise
        self._take(self._layout(self.nodes, self.edges))
        if self.fuse is not None:
            self.fuse = OutputFuse(self.out_channels, self.sample_rate, self.fuse.ceiling)

    # -- the audio side ------------------------------------------------------------------------

    def process(self, block: np.ndarray) -> np.ndarray:
        """Apply due changes, run one block through every node, fuse. A block of another shape
        raises a BendingError; a failing model call outputs the dry signal (or silence) and
        counts."""
        started = time.perf_counter()
        dry = np.asarray(block, dtype=np.float32)
        if self._incoming is not None and self._fading is None:  # a swap starts at this block
            self._fading, self._incoming = self._incoming, None
            self._fading.node.time = self.nodes[self._fading.name].time
            self.swapped_at = self.time
        fading = self._fading
        modulation = self.modulation
        if modulation is not None:
            modulation.begin(self.time, dry)
        outputs = {IN: dry}
        for name in self.order:
            x = self._gathered(name, outputs)
            self.recent[name].record(x)
            node = self.nodes[name]
            node_started = time.perf_counter()
            if fading is not None and fading.name == name:
                outputs[name] = fading.play(node, x)  # both nodes' time, counted as the node's
            else:
                outputs[name] = node.process(x)
            node.compute.record(time.perf_counter() - node_started, self._budget)
            if modulation is not None:
                modulation.heard(name, outputs[name], self.time)
        for name, frames in self.frame_taps.items():
            if name in outputs:
                frames.record(outputs[name])
        out = self._gathered(OUT, outputs)
        if self.fuse is not None:
            out = self.fuse.process(out)
        if self.tap is not None:
            self.tap.record(dry, out)
        if fading is not None and fading.done:
            self._swapped(fading)
        self.time += self.block
        self.stats.record(time.perf_counter() - started, self._budget)
        return out

    def _swapped(self, swap: NodeSwap) -> None:
        """The crossfade is over: play the swap's layout, the replaced node retired (audio
        side: reference writes, and the realigned branches' lines given the history they had,
        paired on the control side)."""
        old = self.nodes[swap.name]
        for line, before in swap.carries:
            line.carry(before)
        self._take(swap.layout)
        self.retired.append(old)
        self.swaps += 1
        self._fading = None

    def _gathered(self, target: str, outputs: dict[str, np.ndarray]) -> np.ndarray:
        """The sum of ``target``'s inputs, each delayed and scaled (one plain edge: as it is)."""
        total = None
        for edge in self._inputs[target]:
            x = outputs[edge.source]
            if edge.delay is not None:
                x = edge.delay.process(x)
            if edge.gain != 1.0:
                x = x * np.float32(edge.gain)
            total = x if total is None else total + x
        return total

    def stream(self, audio: np.ndarray) -> Iterator[np.ndarray]:
        """:meth:`process` over ``audio`` [channels, frames] (audio, or frames at the input's
        rate), block after block: the last block is padded with zeros and its output cut to
        what the input covers (a frame at a control rate that starts inside it counts)."""
        frames, step, out = audio.shape[-1], self.in_frames, self.out_frames
        for start in range(0, frames, step):
            chunk = audio[:, start : start + step]
            if chunk.shape[-1] < step:
                chunk = np.pad(chunk, ((0, 0), (0, step - chunk.shape[-1])))
            played = self.process(np.ascontiguousarray(chunk, dtype=np.float32))
            yield played[:, : min(out, -(-(frames - start) * out // step))]

    def __call__(
        self, audio: np.ndarray | torch.Tensor, sample_rate: int, reset: bool = True
    ) -> np.ndarray | torch.Tensor:
        """Play a whole signal, as pedalboard's ``board(audio, sr)``: a numpy array or tensor,
        ``[channels, frames]`` or 1-D mono, at ``sample_rate`` (resampled to the model's and
        back with soxr); returns the same type, shape and rate. ``reset=False`` continues the
        stream of the last call (joins are exact where calls are whole blocks long)."""
        if self.spec.in_ratio != 1 or self.spec.out_ratio != 1:
            raise BendingError(f"engine(audio, sr) plays audio methods; '{self.method}' is not")
        tensor = audio if isinstance(audio, torch.Tensor) else None
        signal = audio.detach().cpu().numpy() if tensor is not None else np.asarray(audio)
        mono = signal.ndim == 1
        signal = signal[None] if mono else signal
        per_stream = self.spec.in_channels
        if signal.ndim == 2 and self.adapts and reset and signal.shape[0] % per_stream == 0:
            self.set_streams(max(1, signal.shape[0] // per_stream))
        if signal.ndim != 2 or signal.shape[0] != self.in_channels:
            raise BendingError(
                f"this engine plays {self.in_channels} channel(s) ([{self.in_channels}, frames], "
                f"or 1-D for one), got {list(np.shape(audio))}: " + self._channels_hint(reset)
            )
        if reset:
            self.reset_state()
        frames = signal.shape[-1]
        played = resample_audio(signal.astype(np.float32), int(sample_rate), self.sample_rate)
        out = np.zeros((self.out_channels, played.shape[-1]), dtype=np.float32)
        position = 0
        for block in self.stream(played):
            out[:, position : position + block.shape[-1]] = block
            position += block.shape[-1]
        out = fit_length(resample_audio(out, self.sample_rate, int(sample_rate)), frames)
        if self.fuse is not None and int(sample_rate) != self.sample_rate:
            self.fuse.hold(out)  # the resampler may overshoot the ceiling
        out = out[0] if mono and self.out_channels == 1 else out
        if tensor is None:
            return out
        return torch.from_numpy(np.ascontiguousarray(out)).to(tensor.device, tensor.dtype)

    def _channels_hint(self, reset: bool) -> str:
        """What to do when ``engine(audio, sr)`` gets a channel count it cannot play."""
        if not self.adapts:
            return "make it without streams to play any number of channels, one stream each"
        if not reset:
            return "reset=True starts a stream with another number of channels"
        first = self.nodes[_fed_by_in(self.edges)[0]]
        return f"model '{first.model.name}' takes {first.spec.in_channels} channel(s) a stream"

    def apply_due(self) -> None:
        """Apply the changes due at this block on every node (the first step of each node's
        ``process``)."""
        for node in self.nodes.values():
            node.apply_due()

    def _reset_fuse(self) -> None:
        if self.fuse is not None:
            self.fuse.reset()

    def reset_state(self) -> None:
        """Clear every node's streaming state (caches) and the fuse's filter, right now."""
        for node in self.nodes.values():
            node.reset_state()
        for inputs in self._inputs.values():
            for edge in inputs:
                if edge.delay is not None:
                    edge.delay.reset()
        self._reset_fuse()

    # -- the control side ----------------------------------------------------------------------

    def swap(self, name: str, node: Node, fade_ms: float = 50.0, rename: str | None = None) -> None:
        """Play ``node`` in place of node ``name`` from the next block on, crossfaded over
        ``fade_ms`` (control side; see :mod:`.switch`). It must take and give what ``name``
        does (channels, rate, block); another latency realigns the branches once the fade
        is over. ``rename``: its name from then on (a one-node rack's follows its model)."""
        self.check_idle()
        old = self.nodes.get(name)
        if old is None:
            raise BendingError(f"no rack node {name!r} (nodes: {self.names})")
        plays = (old.spec, old.block, old.sample_rate, old.streams)
        if (node.spec, node.block, node.sample_rate, node.streams) != plays:
            raise BendingError(
                f"'{node.method}' of model '{node.model.name}' plays {_plays(node)}; node "
                f"'{name}' plays {_plays(old)}: load a model that fits its place in the rack"
            )
        new = rename or name
        if new != name and new in self.nodes:
            raise BendingError(f"the rack already has a node {new!r}")
        named = lambda end: new if end == name else end  # noqa: E731
        nodes = {named(key): node if key == name else value for key, value in self.nodes.items()}
        edges = [Edge(named(e.source), named(e.target), e.gain) for e in self.edges]
        layout = self._layout(nodes, edges)
        for key, value in nodes.items():  # the nodes that stay keep their recent input
            if key in self.recent and self.nodes.get(key) is value:
                layout.recent[key] = self.recent[key]
        before = {
            (named(target), named(edge.source)): edge.delay
            for target, inputs in self._inputs.items()
            for edge in inputs
        }
        carries = [  # each delayed edge of the new layout, from the line it had (if any)
            (edge.delay, kept)
            for target, inputs in layout.inputs.items()
            for edge in inputs
            if edge.delay is not None and (kept := before.get((target, edge.source))) is not None
        ]
        node.stats = self.stats
        node.on_reset = self._reset_fuse
        self._incoming = NodeSwap(name, node, layout, fade_ms, carries)

    @property
    def busy(self) -> bool:
        """Whether a swap was handed over and has not finished its crossfade yet."""
        return self._incoming is not None or self._fading is not None

    def check_idle(self) -> None:
        """Refuse a change of the rack's nodes while a swap has not finished its crossfade."""
        if self.busy:
            raise BendingError(
                "the last model loaded is not playing yet (is the audio running?): load another "
                "once it plays"
            )

    @contextlib.contextmanager
    def holding_changes(self) -> Iterator[None]:
        """Every node's due changes wait while the block runs (control side): changes submitted
        to several nodes inside apply at the same block boundary."""
        nodes = list(self.nodes.values())
        for node in nodes:
            node.held = True
        try:
            yield
        finally:
            for node in nodes:
                node.held = False

    def load_parts(self, preset: Preset, at: int | None = None) -> None:
        """Give each node a rack's ``preset`` names its part (``/preset/save`` of a rack): every
        part checked before any loads (a part that does not fit changes no node), all applied
        at one block boundary; the nodes it does not name keep what they play."""
        unknown = sorted(set(preset.nodes) - set(self.nodes))
        if unknown:
            raise BendingError(
                f"preset '{preset.name}' sets nodes {unknown} this rack does not play (its "
                f"nodes: {self.names}): load it into a rack of those nodes"
            )
        for name, part in preset.nodes.items():
            self.nodes[name].check_preset(part)
        with self.holding_changes():
            for name, part in preset.nodes.items():
                self.nodes[name].load_preset(part, at=at)

    def take_retired(self) -> list[Node]:
        """The nodes replaced so far (control side: dropping them frees them)."""
        taken = []
        while self.retired:
            taken.append(self.retired.popleft())
        return taken

    def collect(self) -> None:
        """Free what applied changes replaced, on every node (control side)."""
        for node in self.nodes.values():
            node.collect()

    def failures(self) -> list[str]:
        """Failures the audio side met since the last call (each kind once), to report."""
        if len(self.nodes) == 1:
            return self._first.failures()
        return [f"{name}: {line}" for name, node in self.nodes.items() for line in node.failures()]

    def stats_dict(self) -> dict[str, float]:
        fuse = self.fuse
        return {
            "blocks": self.stats.blocks,
            "late": self.stats.late,
            "errors": self.stats.errors,
            **self.stats.compute_ms(),
            "nan": fuse.nonfinite_samples if fuse else 0,
            "limited": fuse.limited_samples if fuse else 0,
            "commands": sum(node.commands.applied for node in self.nodes.values()),
            "pending": sum(node.commands.pending() for node in self.nodes.values()),
            **(self._node_ms() if len(self.nodes) > 1 else {}),
        }

    def _node_ms(self) -> dict[str, float]:
        """Each node's p50 and max compute time (``<node>_p50_ms``, ``<node>_max_ms``)."""
        times: dict[str, float] = {}
        for name in self.order:
            ms = self.nodes[name].compute.compute_ms()
            times |= {f"{name}_p50_ms": ms["p50_ms"], f"{name}_max_ms": ms["max_ms"]}
        return times


def _into(edges: Sequence[Edge], target: str) -> list[Edge]:
    return [edge for edge in edges if edge.target == target]


def _fed_by_in(edges: Sequence[Edge]) -> list[str]:
    """The nodes the rack's input feeds."""
    return [edge.target for edge in edges if edge.source == IN and edge.target != OUT]


def _carried(nodes: Mapping[str, Node], edges: Sequence[Edge], source: str) -> tuple[int, int]:
    """What ``source``'s output carries: (channels per stream, audio samples per frame)."""
    if source == IN:
        first = nodes[_fed_by_in(edges)[0]]
        return first.spec.in_channels, first.spec.in_ratio
    spec = nodes[source].spec
    return spec.out_channels, spec.out_ratio


def _check_edges(nodes: Mapping[str, Node], edges: Sequence[Edge]) -> None:
    """Every edge joins outputs and inputs of the same channels, rate, block and sample rate:
    refused here, naming the edge, before anything plays."""
    first = next(iter(nodes.values()))
    for name, node in nodes.items():
        if (node.block, node.sample_rate, node.streams) != (
            first.block,
            first.sample_rate,
            first.streams,
        ):
            raise BendingError(
                f"rack node '{name}' plays blocks of {node.block} at {node.sample_rate} Hz, "
                f"{node.streams} stream(s), and the first node {first.block} at "
                f"{first.sample_rate} Hz, {first.streams}: give the rack one block and rate"
            )
    if not _fed_by_in(edges):
        raise BendingError("no edge from 'in' into a node: the rack's input goes nowhere")
    for edge in edges:
        if edge.target == IN or edge.source == OUT:
            raise BendingError(
                f"edge {edge.source} -> {edge.target}: 'in' only feeds, 'out' only takes"
            )
        carried = _carried(nodes, edges, edge.source)
        if edge.target == OUT:
            into_out = {_carried(nodes, edges, e.source) for e in _into(edges, OUT)}
            wanted = carried if len(into_out) == 1 else None
        else:
            spec = nodes[edge.target].spec
            wanted = (spec.in_channels, spec.in_ratio)
        if carried != wanted:
            raise BendingError(
                f"edge {edge.source} -> {edge.target}: {edge.source} gives "
                f"{_carrying(carried)} and {edge.target} takes "
                f"{_carrying(wanted) if wanted else 'another signal from its other edges'}: "
                "join outputs to inputs of the same channels and rate (an encode's latent "
                "into a decode, audio into audio)"
            )


def _plays(node: Node) -> str:
    spec = node.spec
    return (
        f"{_carrying((spec.in_channels, spec.in_ratio))} in, "
        f"{_carrying((spec.out_channels, spec.out_ratio))} out, blocks of {node.block} at "
        f"{node.sample_rate} Hz, {node.streams} stream(s)"
    )


def _carrying(carried: tuple[int, int]) -> str:
    channels, ratio = carried
    rate = "audio" if ratio == 1 else f"frames at 1/{ratio} of the audio rate"
    return f"{channels} channel(s) of {rate}"


def _ordered(names: list[str], edges: Sequence[Edge]) -> list[str]:
    """The nodes in an order where each comes after every node feeding it; refuses unknown
    names, cycles, and nodes that nothing feeds or whose output goes nowhere."""
    known = {IN, OUT, *names}
    for edge in edges:
        for end in (edge.source, edge.target):
            if end not in known:
                raise BendingError(
                    f"edge {edge.source} -> {edge.target}: no node '{end}' (nodes: "
                    f"{', '.join(names)}; 'in' and 'out' are the rack's input and output)"
                )
    for name in [*names, OUT]:
        if not any(edge.target == name for edge in edges):
            raise BendingError(f"nothing feeds '{name}': add an edge into it")
    for name in names:
        if not any(edge.source == name for edge in edges):
            raise BendingError(f"the output of '{name}' goes nowhere: add an edge from it")
    order: list[str] = []
    placed = {IN}
    while len(order) < len(names):
        ready = [
            name
            for name in names
            if name not in placed
            and all(edge.source in placed for edge in edges if edge.target == name)
        ]
        if not ready:
            left = [name for name in names if name not in placed]
            raise BendingError(
                f"the edges make a loop through {', '.join(left)}: a rack is "
                "played in one pass, with no feedback"
            )
        order.extend(ready)
        placed.update(ready)
    return order
