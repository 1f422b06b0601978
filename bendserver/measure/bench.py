"""Benchmarks printed by ``bendserver bench``: engine against raw eager, in one process.

Per block size: the raw eager module (of a ``.ts``: its direct scripted call, what nn~ runs), then
the engine unbended and with a preset, each with the graph as traced (``optimize none``) and
optimised (a ``.ts``: its methods converted into graphs), called in turn (so machine noise hits
all alike), reported as p50/p99/max per block, ratios of medians to the first (raw eager or the
direct scripted call), and the real-time factor (block duration / p50). On a CUDA device each
engine runs twice, as a CUDA graph and eager CUDA, every figure including the transfers to and
from the host. Also the cost of applying a weight change (an interpolation of every weight) at a
block boundary on a 10 M-parameter model. With a preset, the same engine with four modulators
driving eight routes: what the modulators cost per block.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn

from ..engine import StreamEngine
from ..engine.rack import Rack
from ..loader import resolve_device
from ..modulation import exercised
from ..play import PlayOptions
from ..presets.library import preset_for
from ..rackspec import RackSpec


def _percentiles(samples: Sequence[float]) -> dict[str, float]:
    values = np.asarray(samples) * 1e3
    p50, p99 = np.percentile(values, [50, 99])
    return {"p50_ms": float(p50), "p99_ms": float(p99), "max_ms": float(values.max())}


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _captured(engine: Rack) -> bool:
    """Whether every node of ``engine`` plays its graph as a CUDA graph."""
    graphs = [node.cuda_graphs for node in engine.nodes.values()]
    return all(g is not None and g.failure is None for g in graphs)


def bench_blocks(play: PlayOptions, blocks: Sequence[int], calls: int = 300) -> dict[str, Any]:
    """Engine vs raw eager for each block size, the engine with ``optimize none`` and
    ``play.optimize`` (its block: each of ``blocks``)."""
    return {str(block): bench_block(replace(play, block=block), calls) for block in blocks}


def bench_block(play: PlayOptions, calls: int) -> dict[str, Any]:
    """One block size: raw eager and the engines, called in turn (see the module)."""
    raw_model = play.load()
    play = replace(play, latency=raw_model.latency)  # measured once
    preset = preset_for(raw_model, play.preset)
    on_cuda = resolve_device(play.device).type == "cuda"
    runners = {"cuda graph": True, "eager cuda": False} if on_cuda else {"": False}
    engines: dict[str, Rack] = {}
    for mode in dict.fromkeys(("none", play.optimize)):
        for bending in (None, preset) if preset else (None,):
            for runner, captured in runners.items():
                name = f"engine{f' + preset {bending}' if bending else ' unbended'} ({mode}"
                engine = replace(
                    play, preset=bending or "none", optimize=mode, cuda_graph=captured
                ).build()[0]
                if captured and not _captured(engine):
                    continue  # it plays eager CUDA (its log line says why): the next row
                engines[f"{name}{f', {runner}' if runner else ''})"] = engine
    if preset:  # the cost of modulators per block: four, eight routes, on the preset
        modulated, _ = replace(play, preset=preset).build()
        exercised(modulated)
        runner = next(iter(runners)) if _captured(modulated) else "eager cuda"
        where = f", {runner}" if on_cuda else ""
        engines[f"engine + preset, 4 modulators, 8 routes ({play.optimize}{where})"] = modulated
    plain = next(iter(engines.values()))
    rng = np.random.default_rng(0)
    audio = (0.3 * rng.standard_normal((plain.in_channels, plain.in_frames))).astype(np.float32)
    tensor = torch.from_numpy(audio).unsqueeze(0)
    forward = getattr(raw_model.module, plain.method)

    def raw() -> None:  # on a GPU: the copies to and from it included, as the engine's are
        with torch.inference_mode():
            forward(tensor.to(play.device)).cpu()

    # a .ts: the direct scripted call (what nn~ runs) against the engine's converted graph
    baseline = "direct scripted call" if raw_model.bended.scripted else "raw eager"
    runs = {baseline: raw}
    runs.update({name: functools.partial(e.process, audio) for name, e in engines.items()})
    duration_ms = 1e3 * play.block / plain.sample_rate
    stats = _compared(runs, calls, duration_ms)
    source = raw_model.latency_source
    return {
        "block_ms": duration_ms,
        "latency": play.latency,
        "latency_source": source,
        "runs": stats,
    }


def bench_rack(
    spec: RackSpec,
    blocks: Sequence[int],
    calls: int = 300,
    search: Sequence[str] = (),
    optimize: str = "passes",
    device: str = "cpu",
) -> dict[str, Any]:
    """A rack against its nodes' models played as separate one-node racks one after the other
    (a chain's nodes; same presets), for each block size: what the rack's loop costs."""
    play = PlayOptions(
        rack=spec, models_dir=tuple(search), optimize=optimize, device=device, fuse=False
    )
    results: dict[str, Any] = {}
    for block in blocks:
        rack, _ = replace(play, block=block).build()
        alone = [
            replace(play, block=block, rack=RackSpec((node,))).build()[0] for node in spec.nodes
        ]
        rng = np.random.default_rng(0)
        audio = (0.3 * rng.standard_normal((rack.in_channels, rack.in_frames))).astype(np.float32)

        def separate(x: np.ndarray = audio, engines: list = alone) -> None:
            for engine in engines:
                x = engine.process(x)

        runs = {"models one after the other": separate}
        runs[f"rack ({rack.method})"] = functools.partial(rack.process, audio)
        duration_ms = 1e3 * block / rack.sample_rate
        results[str(block)] = {
            "block_ms": duration_ms,
            "latency": rack.latency,
            "latency_source": "the rack's longest path",
            "runs": _compared(runs, calls, duration_ms),
        }
    return results


def _compared(runs: dict[str, Callable[[], Any]], calls: int, block_ms: float) -> dict:
    """p50/p99/max of ``calls`` timed calls of each run, taken in turn (a busy machine slows
    each alike) after 10 untimed ones; ratios to the first run and to real time."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():
        for _ in range(10):
            fn()
    for _ in range(calls):
        for name, fn in runs.items():
            samples[name].append(_timed(fn))
    stats = {name: _percentiles(s) for name, s in samples.items()}
    first_p50 = next(iter(stats.values()))["p50_ms"]
    for entry in stats.values():
        entry["ratio_p50"] = entry["p50_ms"] / first_p50
        entry["realtime_x"] = block_ms / entry["p50_ms"]
    return stats


class _WideStack(nn.Module):
    """1 -> 512 channels, ``layers`` 512-channel convolutions (3.4 M parameters each), -> 1:
    a large model for the weight-apply measurement."""

    def __init__(self, layers: int) -> None:
        super().__init__()
        self.inner = nn.Sequential(
            nn.Conv1d(1, 512, 1),
            *(nn.Conv1d(512, 512, 13, padding=6) for _ in range(layers)),
            nn.Conv1d(512, 1, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def bench_weight_apply(sizes: Sequence[int] = (10, 30), repeats: int = 20) -> list[dict]:
    """What a weight change (an interpolation of every weight) costs, for models of ``sizes``
    millions of parameters: prepared on the control side, applied at a block boundary by the
    audio side (swaps only), and what it replaced freed on the control side afterwards."""
    results = []
    for size in sizes:
        torch.manual_seed(0)
        layers = max(1, round(size * 1e6 / (512 * 512 * 13)))
        engine = StreamEngine(_WideStack(layers), block=64, fuse=False)
        engine.bended.create_version("other", _WideStack(layers))
        prepare, apply, free = [], [], []
        for i in range(repeats):
            mix = {"_default": 1.0, "other": 0.25 + 0.5 * (i % 2)}
            prepare.append(_timed(functools.partial(engine.set_interpolation, mix)))
            apply.append(_timed(engine.apply_due))
            free.append(_timed(engine.collect))
        results.append(
            {
                "parameters": sum(p.numel() for p in engine.model.module.parameters()),
                "tensors": len(engine.bended.weight_bank.slots),
                **{f"prepare_{k}": v for k, v in _micros(prepare).items()},
                **{f"apply_{k}": v for k, v in _micros(apply).items()},
                **{f"free_{k}": v for k, v in _micros(free).items()},
            }
        )
    return results


def _micros(samples: Sequence[float]) -> dict[str, float]:
    values = np.asarray(samples) * 1e6
    return {"p50_us": float(np.percentile(values, 50)), "max_us": float(values.max())}


def format_results(results: dict[str, Any], apply: list[dict]) -> str:
    lines = []
    for block, entry in results.items():
        lines.append(
            f"block {block} ({entry['block_ms']:.2f} ms of audio), model latency "
            f"{entry['latency']} samples ({entry['latency_source']})"
        )
        lines.append(
            f"  {'':52} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'/ 1st':>7} {'x realtime':>11}"
        )
        for name, s in entry["runs"].items():
            lines.append(
                f"  {name:52} {s['p50_ms']:8.3f} {s['p99_ms']:8.3f} {s['max_ms']:8.3f} "
                f"{s['ratio_p50']:6.2f}x {s['realtime_x']:10.1f}x"
            )
    for entry in apply:
        lines.append(
            f"weight change on {entry['parameters'] / 1e6:.1f} M parameters "
            f"({entry['tensors']} tensors): prepared (control side) p50 "
            f"{entry['prepare_p50_us'] / 1e3:.1f} ms; applied at the block boundary (audio side) "
            f"p50 {entry['apply_p50_us']:.1f} us, max {entry['apply_max_us']:.1f} us; what it "
            f"replaced freed (control side) p50 {entry['free_p50_us']:.1f} us, "
            f"max {entry['free_max_us']:.1f} us"
        )
    return "\n".join(lines)
