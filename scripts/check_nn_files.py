"""Every method of nn~ files through ``info``, ``render`` and ``serve``, against nn~'s direct call.

For each file given: ``bendserver info`` (its exit code and the one line of an error), then each
method: rendered from noise (audio, or frames for a method taking them) through the command
line's render (the model's latency kept, not trimmed) and compared with the file's direct call
block by block from the same seed, as nn~ makes it (``torch.jit.load``, ``set_sample_rate``,
channels it does not give as zeros); then served for a second on the null backend (an
OSCQuery GET of the namespace, the frames it sent over OSC, the errors it counted). Prints one
line per method: plays (converted into a graph or a direct call, the largest difference) or
refused (the one line a user reads).

Usage: ``python scripts/check_nn_files.py FILE.ts [FILE.ts ...]`` (one torch thread).
"""

from __future__ import annotations

import contextlib
import io
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

import bendserver as tb
from bendserver.cli import main as command
from bendserver.errors import describe
from bendserver.rackspec import RackSpec
from bendserver.render.frames import read_frames, write_frames
from bendserver.serve import ServeOptions, Server

BLOCKS = 6


def info(path: Path) -> str:
    """``bendserver info``: ok, or the line it ended with."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = command(["info", str(path), "--trust-model"])
    return "ok" if code == 0 else err.getvalue().strip().splitlines()[-1]


def direct_call(path: Path, method: str, spec: tb.loader.MethodSpec, rate: int, x: np.ndarray):
    """The method's direct call on ``x`` [channels, n], block after block from seed 0, the
    channels it does not give as zeros (as nn~ plays them)."""
    module = torch.jit.load(str(path)).eval()
    if hasattr(module, "set_sample_rate"):
        module.set_sample_rate(rate)
    step = x.shape[-1] // BLOCKS
    outputs = []
    torch.manual_seed(0)
    with torch.no_grad():
        for i in range(BLOCKS):
            y = getattr(module, method)(torch.from_numpy(x[:, i * step : (i + 1) * step])[None])[0]
            filled = torch.zeros(spec.out_channels, y.shape[-1])
            filled[: y.shape[0]] = y
            outputs.append(filled.numpy())
    return np.concatenate(outputs, -1)


def render(path: Path, method: str, model: tb.loader.LoadedModel, folder: Path) -> str:
    """Render noise through the method with the command line; compare with the direct call."""
    spec, block, rate = model.methods[method], model.block, model.sample_rate
    x = 0.3 * np.random.default_rng(0).standard_normal((spec.in_channels, BLOCKS * block))
    x = x[:, :: spec.in_ratio].astype(np.float32)
    source = folder / ("in.npy" if spec.in_ratio != 1 else "in.wav")
    if spec.in_ratio != 1:
        write_frames(source, x, spec.in_ratio / rate)
    else:
        sf.write(source, x.T, rate, subtype="FLOAT")
    out = folder / ("out.npy" if spec.out_ratio != 1 else "out.wav")
    err = io.StringIO()
    args = ["render", str(source), "-m", f"{path}:{method}", "-o", str(out), "--force"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = command([*args, "--no-fuse", "--keep-latency", "--trust-model"])
    if code != 0:
        return f"refused: {err.getvalue().strip().splitlines()[-1]}"
    got = read_frames(out) if spec.out_ratio != 1 else sf.read(out, dtype="float32")[0].T
    want = direct_call(path, method, spec, rate, x)
    got = got.reshape(want.shape[0], -1)[:, : want.shape[-1]]  # the latency kept after it
    return f"plays, max |diff| {np.abs(got - want).max():.1e} (peak {np.abs(want).max():.1e})"


def serve(path: Path, method: str, model: tb.loader.LoadedModel, folder: Path) -> str:
    """A second on the null backend: the namespace's status, frames sent, errors."""
    spec = model.methods[method]
    source = folder / "in.wav"
    if spec.in_ratio == 1:
        sf.write(
            source, np.zeros((model.block * 2, spec.in_channels), np.float32), model.sample_rate
        )
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as free:
        free.bind(("127.0.0.1", 0))
        reply = free.getsockname()[1]
    options = ServeOptions(
        rack=RackSpec.chain([f"{path}:{method}"]), audio="null", osc_port=0, reply_port=reply,
        input=str(source) if spec.in_ratio == 1 else "silence", zeroconf=False, latency=0,
        trust_model=True, channels=spec.in_channels if spec.in_ratio == 1 else None,
    )  # fmt: skip
    try:
        with Server(options) as server:
            with urllib.request.urlopen(server.oscquery.url + "/", timeout=10) as response:
                status = response.status
            time.sleep(1.0)
            errors = server.engine.stats.errors
            sent = server.frames.sent if server.frames is not None else 0
    except Exception as error:
        return f"refused: {describe(error)}"
    frames = f", {sent} frames over OSC" if spec.out_ratio != 1 else ""
    return f"OSCQuery {status}, {errors} errors{frames}"


def main(files: list[str]) -> None:
    torch.set_num_threads(1)
    for name in files:
        path = Path(name)
        print(f"{path.name}: info {info(path)}")
        try:
            model = tb.load_model(path, latency=0)
        except Exception as error:
            print(f"  refused: {describe(error)}")
            continue
        for method, spec in model.methods.items():
            with tempfile.TemporaryDirectory() as folder:
                rendered = render(path, method, model, Path(folder))
                served = serve(path, method, model, Path(folder))
            shape = (
                f"{spec.in_channels}x1/{spec.in_ratio} -> {spec.out_channels}x1/{spec.out_ratio}"
            )
            print(f"  {method} ({shape}): render {rendered}; serve {served}")
            print(f"    {_played_as(model, method)}")


def _played_as(model: tb.loader.LoadedModel, method: str) -> str:
    """Whether the method converts into a graph, or why it plays as a direct scripted call."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            tb.StreamEngine(model, method=method, fuse=False)
    except Exception as error:
        return f"refused: {describe(error)}"
    why = model.bended.unconverted.get(method)
    return f"a direct scripted call: {why}" if why else "converted into a graph"


if __name__ == "__main__":
    main(sys.argv[1:])
