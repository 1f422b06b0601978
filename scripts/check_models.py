"""Check the shipped models in ``models/``: files, manifest, weights, streaming.

For every ``models/<name>/manifest.toml`` (or the directories given on the command line):

* the manifest has the expected keys, the demo is 48 kHz mono FLAC of 3-8 s under 1 MB and
  the directory is under 5 MB;
* each version's safetensors file loads strictly and has its caches zeroed;
* no module keeps a tensor in a plain attribute (state must live in registered buffers);
* streaming equivalence: every method (``forward``; ``encode`` and ``decode`` where the
  manifest lists them) gives the same result, within 1e-5, on a whole signal in one call and
  block by block (256, 512 and 2048 samples), after ``reset_state()``; encode and decode
  interleaved on separate streams match too, so their caches are independent;
* ``reset_state()`` zeroes every buffer in place;
* ``torch.fx.symbolic_trace`` turns ``forward`` into a graph that streams identically.

Plain asserts; prints one line per check. Usage: ``python scripts/check_models.py [DIR ...]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import soundfile
import synth
import torch
import training
from torch import nn

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

BLOCKS = (256, 512, 2048)
ATOL = 1e-5
SIGNAL_FRAMES = 3 * 2048 * 2
MANIFEST_KEYS = {
    "name",
    "description",
    "sample_rate",
    "channels",
    "block",
    "latency",
    "class",
    "demo",
    "preset",
    "kwargs",
    "methods",
    "versions",
    "training",
}


def check_files(model_dir: Path, manifest: dict) -> None:
    """Manifest keys, directory size and demo format."""
    assert set(manifest) == MANIFEST_KEYS, f"manifest keys: {sorted(manifest)}"
    assert manifest["sample_rate"] == synth.SR and manifest["channels"] == 1
    size = sum(f.stat().st_size for f in model_dir.iterdir() if f.is_file())
    assert size < 5 * 2**20, f"{model_dir} holds {size} bytes"
    demo = model_dir / manifest["demo"]
    info = soundfile.info(str(demo))
    assert info.format == "FLAC" and info.samplerate == synth.SR and info.channels == 1
    assert 3.0 <= info.duration <= 8.0 and demo.stat().st_size < 2**20
    print(
        f"  files: {size / 2**20:.2f} MB, demo {info.duration:.1f} s "
        f"{demo.stat().st_size / 1024:.0f} kB"
    )


def load_version(model_class: type[nn.Module], kwargs: dict, path: Path) -> nn.Module:
    """A fresh model with the weights of ``path`` (strict), in eval mode."""
    from safetensors.torch import load_file

    state = load_file(str(path))
    for key, value in state.items():
        if key.endswith("cache"):
            assert not value.any(), f"{path.name}: {key} is not zeroed"
    model = model_class(**kwargs)
    model.load_state_dict(state, strict=True)
    return model.eval()


def check_no_tensor_attributes(model: nn.Module) -> None:
    """State must live in buffers: no module may hold a tensor in a plain attribute."""
    for name, module in model.named_modules():
        for attr, value in vars(module).items():
            assert not isinstance(value, torch.Tensor), f"{name}.{attr} is a plain tensor"


def run_blocks(method, x: torch.Tensor, block: int) -> torch.Tensor:
    """``method`` applied to consecutive blocks of ``x`` (time axis), outputs concatenated."""
    return torch.cat([method(x[..., i : i + block]) for i in range(0, x.shape[-1], block)], -1)


def check_streaming(model: nn.Module, method_name: str, x: torch.Tensor, in_ratio: int) -> float:
    """Max difference between one call and block-by-block calls, for every block size."""
    method = getattr(model, method_name)
    model.reset_state()
    whole = method(x)
    worst = 0.0
    for block in BLOCKS:
        model.reset_state()
        pieces = run_blocks(method, x, block // in_ratio)
        worst = max(worst, (pieces - whole).abs().max().item())
    assert worst < ATOL, f"{method_name}: block-by-block differs by {worst:.2e}"
    return worst


def check_independent_caches(model: nn.Module, x: torch.Tensor, block: int) -> float:
    """Encode stream A and decode unrelated stream B in alternation; both must be unaffected."""
    model.reset_state()
    z_ref = model.encode(x)
    other = torch.roll(z_ref, 7, dims=-1) * 0.5
    model.reset_state()
    y_ref = model.decode(other)
    model.reset_state()
    ratio = x.shape[-1] // z_ref.shape[-1]
    z_parts, y_parts = [], []
    for i in range(0, x.shape[-1], block):
        z_parts.append(model.encode(x[..., i : i + block]))
        y_parts.append(model.decode(other[..., i // ratio : (i + block) // ratio]))
    diff = max(
        (torch.cat(z_parts, -1) - z_ref).abs().max().item(),
        (torch.cat(y_parts, -1) - y_ref).abs().max().item(),
    )
    assert diff < ATOL, f"interleaved encode/decode differ by {diff:.2e}"
    return diff


def check_reset(model: nn.Module, x: torch.Tensor) -> None:
    """After some audio the caches hold data; ``reset_state()`` must zero them in place."""
    buffers = list(model.buffers())
    model.reset_state()
    model(x)
    assert any(b.any() for b in buffers), "no buffer changed while streaming"
    model.reset_state()
    assert all(not b.any() for b in model.buffers()), "reset_state left a buffer nonzero"
    assert all(a is b for a, b in zip(buffers, model.buffers(), strict=True)), "buffer replaced"


def check_fx_trace(model: nn.Module, x: torch.Tensor) -> float:
    """``forward`` traced by ``torch.fx`` streams like the eager model (state in buffers)."""
    graph = torch.fx.symbolic_trace(model)
    model.reset_state()
    eager = model(x)
    model.reset_state()
    traced = run_blocks(graph, x, 512)
    diff = (traced - eager).abs().max().item()
    assert diff < ATOL, f"traced forward differs by {diff:.2e}"
    return diff


def test_signal() -> torch.Tensor:
    """Generated material at a realistic level, ``SIGNAL_FRAMES`` long."""
    audio = synth.mixed_material(np.random.default_rng(99), 1.0)[:SIGNAL_FRAMES]
    return training.to_tensor(audio * 0.8 / max(1e-9, float(np.abs(audio).max())))


@torch.no_grad()
def check_model(model_dir: Path) -> None:
    """All checks for one model directory."""
    manifest = tomllib.loads((model_dir / "manifest.toml").read_text())
    print(f"{manifest['name']}: {manifest['description']}")
    check_files(model_dir, manifest)
    file_name, class_name = manifest["class"].split(":")
    model_class = training.load_model_class(model_dir / file_name, class_name)
    x = test_signal()
    for version, weights in manifest["versions"].items():
        model = load_version(model_class, manifest["kwargs"], model_dir / weights)
        check_no_tensor_attributes(model)
        results = {}
        for name, spec in manifest["methods"].items():
            source = model.encode(x) if name == "decode" else x
            model.reset_state()
            out = getattr(model, name)(source)
            assert out.shape[1] == spec["out_channels"], f"{name}: {tuple(out.shape)}"
            assert out.shape[-1] * spec["out_ratio"] == x.shape[-1], f"{name}: rate"
            results[name] = check_streaming(model, name, source, spec["in_ratio"])
        if "encode" in manifest["methods"]:
            results["encode|decode"] = check_independent_caches(model, x, 512)
        check_reset(model, x)
        results["fx"] = check_fx_trace(model, x)
        params = training.count_parameters(model)
        diffs = ", ".join(f"{k} {v:.1e}" for k, v in results.items())
        print(f"  {version}: {params} parameters; max |one call - blocks|: {diffs}  OK")


def main() -> None:
    """Check the directories on the command line, or every model in ``models/``."""
    dirs = [Path(a) for a in sys.argv[1:]] or sorted(
        p.parent for p in (training.ROOT / "models").glob("*/manifest.toml")
    )
    assert dirs, "no model directories found"
    torch.set_num_threads(1)
    for model_dir in dirs:
        check_model(model_dir)
    print(f"all checks passed ({len(dirs)} models)")


if __name__ == "__main__":
    main()
