"""Train ``models/wavae``: a streaming waveform autoencoder in two versions.

1. ``strings``: trained from scratch on plucked strings and tonal notes
   (:func:`synth.strings_material`).
2. ``percussion``: a copy of ``strings`` fine-tuned on drum hits and noise bursts
   (:func:`synth.percussion_material`). Starting from the ``strings`` weights keeps both
   versions in one basin, so interpolating their weights morphs the sound instead of
   breaking it (the script measures the halfway model too).

Loss: waveform ESR plus a lightly weighted multi-resolution STFT loss (spectral
convergence + log magnitude). Reported: reconstruction ESR and spectral loss of each version
on held-out material of its own kind and of the other kind (cross), of the halfway weight
interpolation and of the untrained model.

Usage: ``python scripts/train_wavae.py [--out models/wavae] [--quick]``
(seeded: a rerun reproduces the same weights on the same torch build).
"""

from __future__ import annotations

import copy
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import synth
import torch
import training
from torch import nn

SEED = 4321
MODEL_FILE = training.ROOT / "models" / "wavae" / "model.py"
KWARGS = {"latent_dim": 8, "channels": [16, 32, 64, 80, 96], "strides": [2, 2, 2, 4]}
BLOCK = 2048
SILENCE_LEVEL = 1e-3  # -60 dBFS: magnitudes below it are compressed less by the log spectra
FLOOR_RMS = 0.03  # -30 dBFS: ESR denominator floor (quieter segments count as plain MSE)
SPECTRAL_WEIGHT = 0.02
FFT_SIZES = (2048, 1024, 512, 256, 128, 64)
MATERIALS = {"strings": synth.strings_material, "percussion": synth.percussion_material}


def stft_magnitude(x: torch.Tensor, n_fft: int) -> torch.Tensor:
    """Magnitude STFT of a [1, 1, T] signal (Hann window, hop n_fft / 4)."""
    window = torch.hann_window(n_fft)
    spec = torch.stft(
        x.reshape(1, -1), n_fft, hop_length=n_fft // 4, window=window, return_complex=True
    )
    return spec.abs()


def spectral_loss(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Multi-resolution STFT loss: mean over ``FFT_SIZES`` of spectral convergence
    ``||Y - X|| / ||X||`` plus mean absolute log-magnitude difference.

    Both get a floor at the level of -60 dBFS noise (``SILENCE_LEVEL``): without it the log
    term's gradient (1 / magnitude) on near-empty bins swamps everything else.
    """
    total = y.new_zeros(())
    for n_fft in FFT_SIZES:
        sy, sx = stft_magnitude(y, n_fft), stft_magnitude(x, n_fft)
        # floor: the magnitude of white noise at SILENCE_LEVEL in one bin (E|X|^2 = r^2 sum w^2)
        floor = SILENCE_LEVEL * (0.375 * n_fft) ** 0.5
        convergence = torch.linalg.norm(sy - sx) / (
            torch.linalg.norm(sx) + floor * sx.numel() ** 0.5
        )
        log_distance = (torch.log(sy + floor) - torch.log(sx + floor)).abs().mean()
        total = total + convergence + log_distance
    return total / len(FFT_SIZES)


def reconstruction_loss(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Waveform ESR plus a lightly weighted multi-resolution STFT loss.

    The squared waveform error drives training: in this short CPU budget it reaches a far
    lower ESR *and* spectral loss than a spectral-first loss, which lets the decoder settle
    on the wrong phases. The spectral term (weight ``SPECTRAL_WEIGHT``) refines the quiet
    high partials that squared error barely sees. The ESR denominator gets a ``FLOOR_RMS``
    floor so that near-silent segments do not turn the decoder's tiny noise into huge losses.
    """
    floor = FLOOR_RMS**2 * x.shape[-1]
    waveform = ((y - x) ** 2).sum() / ((x**2).sum() + floor)
    return waveform + SPECTRAL_WEIGHT * spectral_loss(y, x)


def train(
    model: nn.Module,
    audio: np.ndarray,
    rng: np.random.Generator,
    steps: int,
    segment: int,
    lr: float,
) -> None:
    """Adam on random segments of ``audio`` (batch 1); caches reset before each segment."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    x_all = training.to_tensor(audio)
    start = time.time()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = training.cosine_lr(step, steps, lr, lr / 50)
        offset = int(rng.integers(0, len(audio) - segment))
        x = x_all[..., offset : offset + segment]
        model.reset_state()
        loss = reconstruction_loss(model(x), x)
        training.step(model, optimizer, loss, step, steps, start)


@torch.no_grad()
def evaluate(model: nn.Module, audio: np.ndarray) -> dict[str, float]:
    """Reconstruction ESR and spectral loss of ``audio`` streamed in native blocks."""
    out = training.stream(model, audio, BLOCK)
    spectral = spectral_loss(training.to_tensor(out), training.to_tensor(audio)).item()
    return {"esr": training.esr(out, audio), "spectral": spectral}


def interpolate(a: nn.Module, b: nn.Module, amount: float) -> nn.Module:
    """A copy of ``a`` whose parameters are ``(1 - amount) * a + amount * b``."""
    mixed = copy.deepcopy(a)
    with torch.no_grad():
        for p, pa, pb in zip(mixed.parameters(), a.parameters(), b.parameters(), strict=True):
            p.copy_(torch.lerp(pa, pb, amount))
    return mixed


@torch.no_grad()
def render_morph(a: nn.Module, b: nn.Module, audio: np.ndarray) -> np.ndarray:
    """Stream ``audio`` while the weights glide from ``a`` (first third) to ``b`` (last third).

    The parameters are re-interpolated before every block; the caches carry on untouched,
    as when a host morphs weights live.
    """
    model = copy.deepcopy(a)
    model.reset_state()
    blocks = len(audio) // BLOCK
    x = training.to_tensor(audio[: blocks * BLOCK])
    out = []
    for i in range(blocks):
        amount = float(np.clip(3.0 * i / blocks - 1.0, 0.0, 1.0))
        for p, pa, pb in zip(model.parameters(), a.parameters(), b.parameters(), strict=True):
            p.copy_(torch.lerp(pa, pb, amount))
        out.append(model(x[..., i * BLOCK : (i + 1) * BLOCK]))
    return torch.cat(out, dim=-1)[0, 0].numpy()


def manifest(seconds: dict[str, float], scores: dict, ratio: int) -> dict:
    """The manifest.toml content with the measured times and per-version ESRs."""
    audio = {"in_channels": 1, "in_ratio": 1, "out_channels": 1, "out_ratio": 1}
    latent = KWARGS["latent_dim"]
    return {
        "name": "wavae",
        "description": "Streaming waveform autoencoder (strided causal convs, pixel-shuffle "
        f"decoder), {latent}-dim latent at 1/{ratio} rate",
        "sample_rate": synth.SR,
        "channels": 1,
        "block": BLOCK,
        "latency": 0,
        "class": "model.py:WaveAE",
        "demo": "demo.flac",
        "preset": "wavae",
        "kwargs": KWARGS,
        "methods": {
            "forward": audio,
            "encode": {"in_channels": 1, "in_ratio": 1, "out_channels": latent, "out_ratio": ratio},
            "decode": {"in_channels": latent, "in_ratio": ratio, "out_channels": 1, "out_ratio": 1},
        },
        "versions": {"strings": "strings.safetensors", "percussion": "percussion.safetensors"},
        # reconstruction of held-out generated material: <version>_on_<material>_esr (and
        # _spectral: multi-resolution STFT loss); seconds: whole script, <version>_seconds:
        # training of that version; baseline_esr: the untrained model on strings
        "training": {
            "script": "scripts/train_wavae.py",
            "seconds": round(seconds["total"], 1),
            **{f"{version}_seconds": round(seconds[version], 1) for version in MATERIALS},
            "test_esr": scores["strings"]["strings"]["esr"],
            "baseline_esr": scores["untrained"]["strings"]["esr"],
            **{
                f"{version}_on_{material}_esr": result[material]["esr"]
                for version, result in scores.items()
                for material in MATERIALS
            },
            **{
                f"{version}_on_{material}_spectral": scores[version][material]["spectral"]
                for version in MATERIALS
                for material in MATERIALS
            },
        },
    }


def score_all(models: dict[str, nn.Module], tests: dict[str, np.ndarray]) -> dict:
    """``scores[model][material]`` for every model and test material; prints a table."""
    scores = {
        name: {m: evaluate(model, audio) for m, audio in tests.items()}
        for name, model in models.items()
    }
    for name, result in scores.items():
        row = "  ".join(
            f"{m}: ESR {r['esr']:.4f} spectral {r['spectral']:.3f}" for m, r in result.items()
        )
        print(f"{name:>10}  {row}")
    return scores


def save_outputs(
    out_dir: Path,
    versions: dict[str, nn.Module],
    seconds: dict[str, float],
    scores: dict,
    ratio: int,
) -> None:
    """Write model.py (if ``out_dir`` is elsewhere), weights, demo and manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / "model.py").resolve() != MODEL_FILE:
        shutil.copy(MODEL_FILE, out_dir / "model.py")
    for name, model in versions.items():
        training.save_weights(model, out_dir / f"{name}.safetensors")
    demo = synth.riff(np.random.default_rng(SEED + 9), 6.0)
    synth.write_flac(
        str(out_dir / "demo.flac"), render_morph(versions["strings"], versions["percussion"], demo)
    )
    training.write_manifest(out_dir / "manifest.toml", manifest(seconds, scores, ratio))


@dataclass(frozen=True)
class Plan:
    """How much material and how many steps: the full run or the ``--quick`` smoke test."""

    train_seconds: dict[str, float]
    test_seconds: float
    steps: dict[str, int]
    segment: int


FULL = Plan(
    {"strings": 120.0, "percussion": 60.0}, 20.0, {"strings": 2400, "percussion": 1000}, 16384
)
QUICK = Plan({"strings": 6.0, "percussion": 6.0}, 2.0, {"strings": 5, "percussion": 3}, 8192)
LEARNING_RATES = {"strings": 1e-3, "percussion": 5e-4}


def train_versions(
    model: nn.Module, data: dict[str, np.ndarray], rng: np.random.Generator, plan: Plan
) -> tuple[dict[str, nn.Module], dict[str, float]]:
    """Train ``strings`` (``model`` itself, from scratch), then ``percussion`` from a copy.

    Returns the versions (in eval mode) and the training seconds of each.
    """
    versions, seconds = {}, {}
    for name in MATERIALS:
        start = time.time()
        print(f"== {name}" + (" (fine-tuned from strings)" if versions else " (from scratch)"))
        if versions:
            model = copy.deepcopy(versions["strings"]).train()
        train(model, data[name], rng, plan.steps[name], plan.segment, LEARNING_RATES[name])
        versions[name] = model.eval()
        seconds[name] = time.time() - start
    return versions, seconds


def main() -> None:
    """Generate material, train both versions, evaluate, write everything."""
    args = training.parse_args("wavae", "Train the streaming waveform autoencoder.")
    rng = training.seed_everything(SEED)
    plan = QUICK if args.quick else FULL
    start = time.time()
    data = {m: make(rng, plan.train_seconds[m]) for m, make in MATERIALS.items()}
    test_rng = np.random.default_rng(SEED + 1)
    tests = {m: make(test_rng, plan.test_seconds) for m, make in MATERIALS.items()}
    model = training.load_model_class(MODEL_FILE, "WaveAE")(**KWARGS)
    print(f"WaveAE {KWARGS}: {training.count_parameters(model)} parameters, ratio {model.ratio}")
    untrained = copy.deepcopy(model).eval()
    versions, train_seconds = train_versions(model, data, rng, plan)
    halfway = interpolate(versions["strings"], versions["percussion"], 0.5)
    scores = score_all({**versions, "halfway": halfway, "untrained": untrained}, tests)
    seconds = {"total": time.time() - start, **train_seconds}
    save_outputs(args.out, versions, seconds, scores, model.ratio)
    print(f"done in {seconds['total']:.1f} s")


if __name__ == "__main__":
    main()
