"""A rack's control side: node swaps, changes held to apply together, rack presets, the rack's
output settings, reports."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from ..errors import BendingError
from ..presets.library import Preset
from .node import Node
from .output import check_setting
from .switch import NodeSwap
from .wiring import Edge, node_plays

#: Given the nodes a rack plays after a swap, what else starts with it (:meth:`RackControl.swap`).
Brings = Callable[[dict[str, Node]], "Callable[[int], None] | None"]


class RackControl:
    """What the control side asks of a rack as a whole (a node's own changes go to the node):
    swap a node live, hold the nodes' changes to apply them at one block, load a rack preset's
    parts, free what was retired, report failures and figures."""

    def swap(
        self,
        name: str,
        node: Node,
        fade_ms: float = 50.0,
        rename: str | None = None,
        brings: Brings | None = None,
    ) -> None:
        """Play ``node`` in place of node ``name`` from the next block on, crossfaded over
        ``fade_ms`` (control side; see :mod:`.switch`). It must take and give what ``name``
        does (channels, rate, block); another latency realigns the branches once the fade
        is over. ``rename``: its name from then on (a one-node rack's follows its model).
        ``brings``, called once the swap is checked with the nodes the rack plays after it:
        what else starts at the crossfade's first block (None: nothing)."""
        self.check_idle()
        old = self.nodes.get(name)
        if old is None:
            raise BendingError(f"no rack node {name!r} (nodes: {self.names})")
        plays = (old.spec, old.block, old.sample_rate, old.streams)
        if (node.spec, node.block, node.sample_rate, node.streams) != plays:
            raise BendingError(
                f"'{node.method}' of model '{node.model.name}' plays {node_plays(node)}; node "
                f"'{name}' plays {node_plays(old)}: load a model that fits its place in the rack"
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
        starts = brings(layout.nodes) if brings is not None else None
        node.stats = self.stats
        node.on_reset = self._reset_fuse
        self._incoming = NodeSwap(name, node, layout, fade_ms, carries, starts)

    @property
    def nodes_to_come(self) -> dict[str, Node]:
        """The nodes the rack plays once the swap handed over (if any) is done: what a
        change prepared now resolves its addresses over."""
        swap = self._incoming or self._fading
        return swap.layout.nodes if swap is not None else self.nodes

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
        """Every node's due changes (and the output's) wait while the block runs (control side):
        changes submitted to several nodes inside apply at the same block boundary."""
        held = [*self.nodes.values(), self.output]
        for part in held:
            part.held = True
        try:
            yield
        finally:
            for part in held:
                part.held = False

    def load_parts(self, preset: Preset, at: int | None = None) -> None:
        """Give each node a rack's ``preset`` names its part (``/preset/save`` of a rack), and
        the rack its output gain: every part checked before any loads (a part that does not
        fit changes no node), all applied at one block boundary; the nodes it does not name
        keep what they play."""
        unknown = sorted(set(preset.nodes) - set(self.nodes))
        if unknown:
            raise BendingError(
                f"preset '{preset.name}' sets nodes {unknown} this rack does not play (its "
                f"nodes: {self.names}): load it into a rack of those nodes"
            )
        for name, part in preset.nodes.items():
            self.nodes[name].check_preset(part)
        gain = check_setting("gain", preset.gain)
        with self.holding_changes():
            for name, part in preset.nodes.items():
                self.nodes[name].load_preset(part, at=at)
            self.set_output("gain", gain, at)

    def take_retired(self) -> list[Node]:
        """The nodes replaced so far (control side: dropping them frees them)."""
        taken = []
        while self.retired:
            taken.append(self.retired.popleft())
        return taken

    def set_output(self, name: str, value: float | bool, at: int | None = None) -> None:
        """Set the rack's output ``gain`` (0..16), ``mute`` or ``bypass`` (its input out)
        from the next block on, or the block at sample ``at`` (see :mod:`.output`)."""
        self.output.set(name, value, self.time, at)

    def collect(self) -> None:
        """Free what applied changes replaced, on every node and the output (control side)."""
        for node in self.nodes.values():
            node.collect()
        self.output.collect()

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
