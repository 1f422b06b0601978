"""What a server reports, as :class:`ServerReport`, a side of
:class:`~bendserver.serve.server.Server`: its latency, the counters ``/stats`` adds to the
engine's, and the banner :func:`~bendserver.serve.run` prints (the model or the rack's nodes,
the audio path and its latency, the OSC, OSCQuery and page addresses, one message to try)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..audio import output_devices
from ..engine.node import Node
from ..engine.rack import Rack
from ..rackspec import counted
from .options import ServeOptions


class ServerReport:
    """The figures and the banner's lines, from the parts a
    :class:`~bendserver.serve.server.Server` put together."""

    engine: Rack
    options: ServeOptions
    backend: Any
    processor: Any
    source: Any
    osc: Any
    oscquery: Any
    midi: Any
    frames: Any
    recorder: Any
    controller: Any
    fallback: bool
    running: bool
    mode: str
    callback: Any
    jack: Any

    @property
    def lead(self) -> Node:
        """The rack's first node: its device and optimisation are every node's."""
        return next(iter(self.engine.nodes.values()))

    @property
    def latency(self) -> int:
        """Samples from input to output: the model's own plus what the processor (or the rings
        and resamplers) add."""
        return self.engine.latency + self.added_latency

    @property
    def added_latency(self) -> int:
        """Samples the audio path adds to the model's own latency (model rate): the rings and
        resamplers, or the processor's and what PortAudio's stream holds beyond the device."""
        if self.processor is None:
            return self.backend.latency
        return self.processor.latency + self.backend.latency

    def counters(self) -> dict[str, float]:
        """The server's counters (audio and OSC), as /stats adds them to the engine's."""
        counters = {"latency": self.latency, **self.callback.counters(), **self.osc.counters()}
        if self.jack is not None:  # JACK's own count; the callback's flags tell fewer
            counters["callback_xruns"] = counters["xruns"]
            counters["xruns"] = self.jack.count
        counters["latency_ms"] = 1e3 * self.latency / self.engine.sample_rate
        counters["path_latency_ms"] = 1e3 * self.added_latency / self.engine.sample_rate
        if self.midi is not None:
            counters.update(self.midi.counters())
        if self.mode == "threaded":
            counters["overruns"] = self.processor.overruns
        if self.recorder is not None:
            counters["record_dropped"] = self.recorder.dropped
        return counters

    def stats(self) -> dict[str, float]:
        """The engine's statistics with the server's counters, as /stats replies them."""
        stats = self.engine.stats_dict()
        return {"blocks": stats.pop("blocks"), **self.counters(), **stats}

    def banner(self) -> str:
        """What runs, where, and one message to try."""
        engine, options, lead = self.engine, self.options, self.lead
        ms = 1000 * self.latency / engine.sample_rate
        lines = [
            *self._model_lines(),
            f"runs on    {lead.runs_on}",
            f"audio      {self.backend.name}",
            f"input      {self.source.name if self.source else options.input}",
            f"block      {engine.block} (device block {self.backend.block}"
            f"{self._rates()}), {self._mode_line()}, graph optimised: {lead.optimize}",
            *(f"compile    {r}" for n in engine.nodes.values() for r in n.compile_report),
            f"latency    {self.latency} samples ({ms:.2f} ms) before the device's own: "
            f"{self._latency_parts()}",
            f"osc        listening on {self.osc.receiver.host}:{self.osc.port} "
            f"(receive buffer {self.osc.rcvbuf} bytes granted), replies to "
            f"{options.reply_host or 'the sender'}:{options.reply_port}",
        ]
        models = len(engine.nodes) + (len(engine.nodes) > 1)  # the model lines' count
        for node in engine.nodes.values():
            if node.bended.scripted:
                unconverted = node.bended.unconverted.get(node.method)
                lines.insert(
                    models,
                    f"torchscript {node.method}() plays as a direct scripted call: {unconverted}"
                    if unconverted
                    else f"torchscript {node.method}() converted into a graph: every op bends it",
                )
        if self.fallback:
            found = sorted({d.hostapi for d in output_devices() or []})
            hint = f" (found: {', '.join(found)})" if found else ""
            lines.insert(
                1,
                "note       no default sound card: playing on the null backend; "
                f"--audio NAME picks a device{hint}",
            )
        lines.append(
            f"oscquery   {self.oscquery.url}"
            + (" (zeroconf: _oscjson._tcp)" if self.oscquery.advertise else self._unadvertised())
            if self.oscquery is not None
            else "oscquery   off (--oscquery-port N serves the namespace to OSCQuery clients)"
        )
        if self.oscquery is not None:
            lines.append(f"page       {self.oscquery.url}/ui (the control page, in a browser)")
        networks = [str(n) for n in self.osc.receiver.networks]
        if self.osc.receiver.host not in ("127.0.0.1", "::1", "localhost"):
            lines.append(
                f"allowed    OSC from {', '.join(networks)} only"
                + ("" if options.allow else " (add networks with --allow CIDR)")
            )
        if self.running:
            lines.append(
                "priority   control worker at real-time priority"
                if self.osc.realtime
                else "priority   normal: no permission for real-time threads (see docs/serve.md)"
            )
        if self.midi is not None:
            lines.append(
                f"midi       {self.midi.name}, {len(self.controller.midi.mappings())} mappings"
            )
        if self.frames is not None:
            lines.append(f"frames     {self.frames.describe()}")
        if self.recorder is not None:
            lines.append(f"recording  {self.recorder.path}")
        there = f" on {options.reply_host}" if options.reply_host else ""
        lines += [
            f"replies    oscdump {options.reply_port} prints them{there}; oscsend localhost "
            f"{self.osc.port} /get{self._example()[0]} answers the value playing",
            "stop       Ctrl-C",
            f"try        {self.example()}",
        ]
        return "\n".join(lines)

    def _unadvertised(self) -> str:
        """Why OSCQuery is not advertised over zeroconf."""
        if not self.options.zeroconf:
            return " (not advertised)"
        return " (not advertised: OSC listens on loopback only)"

    def _model_lines(self) -> list[str]:
        """What plays: the model, or the rack's nodes in order (each with its ops and the
        address its OSC messages start with)."""
        engine = self.engine
        shape = (
            f"{engine.sample_rate} Hz, {engine.spec.in_channels} -> {engine.spec.out_channels} ch"
            f"{f' x {engine.streams} streams' if engine.streams > 1 else ''}"
        )
        if len(engine.nodes) == 1:
            node = self.lead
            return [f"model      {node.model.name} ({node.method}, {shape}), {_ops(node)}"]
        lines = [f"rack       {counted(engine)} ({shape}), /list nodes names them"]
        for name in engine.order:
            node = engine.nodes[name]
            lines.append(f"node       /{name}: {node.model.name} ({node.method}), {_ops(node)}")
        return lines

    def _mode_line(self) -> str:
        if self.mode != "ring":
            return f"{self.mode} mode"
        backend = self.backend
        ahead, warm = backend.ahead, backend.warm_up
        compute, late = (1e3 * float(np.percentile(a, 99)) for a in (warm.compute, warm.late))
        return (
            f"ring mode ({ahead} block{'s' if ahead > 1 else ''} ahead: {backend.slack} frames "
            f"of time a block; warm-up compute p99 {compute:.2f} ms, wake-up p99 {late:.2f} ms)"
        )

    def _rates(self) -> str:
        """The device's rate where the ring mode resamples to it."""
        rate = getattr(self.backend, "rate", self.engine.sample_rate)
        return "" if rate == self.engine.sample_rate else f" at {rate} Hz, resampled"

    def _latency_parts(self) -> str:
        """What the latency is made of: the model's (and where that figure comes from), and what
        the audio path adds (in ring mode the prefill, known once the device's period is)."""
        engine = self.engine
        model = (
            f"the model's {engine.latency} ({self.lead.model.latency_source})"
            if len(engine.nodes) == 1
            else f"the rack's {engine.latency} (its longest path's)"
        )
        if self.mode != "ring":
            held = self.backend.latency
            stream = f" and PortAudio's stream's {held}" if held else ""
            return f"{model}, the {self.mode} path's {self.processor.latency}{stream}"
        ring = self.backend
        held = ring.delays()
        parts = [model, f"the ring's {ring.prefill - held} at {ring.rate} Hz"]
        if held:
            parts.append(f"the resamplers' {held} at {ring.rate} Hz")
        return ", ".join(parts)

    def example(self) -> str:
        """An ``oscsend`` line that changes a parameter of the loaded preset."""
        address, value = self._example()
        return f"oscsend localhost {self.osc.port} {address} f {value:g}"

    def _example(self) -> tuple[str, float]:
        """The address and a safe value of a parameter of the loaded preset (else the gain)."""
        nodes = self.engine.nodes
        prefix = "" if len(nodes) == 1 else f"/{self.engine.order[0]}"
        for name, node in nodes.items():
            for op_id, op in node.ops.items():
                for param_name, param in op.params.items():
                    prefix = "" if len(nodes) == 1 else f"/{name}"
                    value = _example_value(param.low, param.high, op.get(param_name))
                    return f"{prefix}/bend/{op_id}/{param_name}", value
        return f"{prefix}/engine/gain", 0.5


def title(engine: Rack) -> str:
    """The model's name, or the rack's nodes joined by '+'."""
    nodes = engine.nodes
    return next(iter(nodes.values())).model.name if len(nodes) == 1 else "+".join(nodes)


def _ops(node: Node) -> str:
    return f"ops {sorted(node.ops) or 'none'}"


def _example_value(low: float, high: float, current: float) -> float:
    """A musically safe value to try: half the current one (a tenth of the way into the range
    from 0 when it is 0), inside the range."""
    value = current * 0.5 if current else 0.1 * (min(high, 1.0) - max(low, 0.0))
    return round(min(high, max(low, value)), 4)
