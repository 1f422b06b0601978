"""Train ``models/drive``: a small streaming network learning an analog "drive" effect.

The target effect is defined here, in numpy, and applied to generated material
(:func:`synth.mixed_material`: plucks, notes, chirps, drums, noise bursts at levels from
-40 dB to full scale). The network learns to map dry input to effect output; the script reports
the error-to-signal ratio (ESR) on a held-out generated test set against two baselines and
writes the weights, a demo and the manifest.

Usage: ``python scripts/train_drive.py [--out models/drive] [--quick]``
(seeded: a rerun reproduces the same weights on the same torch build).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import synth
import torch
import training

SEED = 1234
MODEL_FILE = training.ROOT / "models" / "drive" / "model.py"
KWARGS = {
    "channels": 8,
    "hidden": 16,
    "pre_taps": 4,
    "tone_taps": 16,
    "sag_taps": 8,
    "sag_dilation": 128,
}
BLOCK = 2048
SILENCE_RMS = 1e-3  # -60 dBFS: segments quieter than this are scored by plain squared error
WARMUP = 2048  # samples at the start of each segment left out of the loss (>= receptive field)

# The target effect (see drive_effect).
PRE_EMPHASIS = 0.5
DRIVE_GAIN = 10.0
ASYMMETRY = 0.7
TONE_CUTOFF = 4000.0
DC_CUTOFF = 25.0
OUTPUT_GAIN = 0.5


def drive_effect(x: np.ndarray) -> np.ndarray:
    """The effect the model learns, causal and starting from rest.

    pre-emphasis ``x[n] - 0.5 x[n-1]`` -> gain 10 -> asymmetric soft clip
    ``tanh(u + b) - tanh(b)`` (even harmonics, and a level-dependent DC offset) -> two
    one-pole low-passes at 4 kHz (tone) -> one-pole DC-blocking high-pass at 25 Hz (whose
    ~300-sample time constant gives the effect memory) -> output gain.
    """
    previous = np.concatenate([[0.0], x[:-1]]).astype(np.float32)
    u = DRIVE_GAIN * (x - PRE_EMPHASIS * previous)
    clipped = np.tanh(u + ASYMMETRY) - np.tanh(ASYMMETRY)
    tone = synth.lowpass(synth.lowpass(clipped.astype(np.float32), TONE_CUTOFF), TONE_CUTOFF)
    return (OUTPUT_GAIN * synth.highpass(tone, DC_CUTOFF)).astype(np.float32)


def make_data(rng: np.random.Generator, seconds: float) -> tuple[np.ndarray, np.ndarray]:
    """A dry signal of generated material and its drive-effect target."""
    dry = synth.mixed_material(rng, seconds)
    return dry, drive_effect(dry)


def balanced_esr_loss(y: torch.Tensor, t: torch.Tensor, chunks: int) -> torch.Tensor:
    """ESR per chunk with the segment's mean chunk energy added to each denominator.

    Loud chunks score about their own ESR and quiet ones about their share of the global ESR,
    so quiet passages count more than in a plain ESR. An absolute floor (``SILENCE_RMS``) keeps
    near-silent segments, where any tiny offset would be a huge relative error, from
    dominating the loss.
    """
    y, t = y.reshape(chunks, -1), t.reshape(chunks, -1)
    energy = (t**2).sum(-1)
    floor = SILENCE_RMS**2 * t.shape[-1]
    return (((y - t) ** 2).sum(-1) / (energy + energy.mean() + floor)).mean() * 2.0


def train(
    model: torch.nn.Module,
    dry: np.ndarray,
    wet: np.ndarray,
    rng: np.random.Generator,
    steps: int,
    segment: int,
) -> None:
    """Adam on random segments of the training signal (batch 1, long segments).

    Each step resets the caches, runs ``WARMUP + segment`` samples and scores the last
    ``segment``: after the warm-up the model has seen as much history as the target had.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    x_all, t_all = training.to_tensor(dry), training.to_tensor(wet)
    start = time.time()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = training.cosine_lr(step, steps, 2e-3, 2e-5)
        offset = int(rng.integers(0, len(dry) - WARMUP - segment))
        x = x_all[..., offset : offset + WARMUP + segment]
        t = t_all[..., offset + WARMUP : offset + WARMUP + segment]
        model.reset_state()
        loss = balanced_esr_loss(model(x)[..., WARMUP:], t, chunks=segment // 4096)
        training.step(model, optimizer, loss, step, steps, start)


def evaluate(model: torch.nn.Module, dry: np.ndarray, wet: np.ndarray) -> dict[str, float]:
    """Test ESR of the model (streamed in native blocks) and of two baselines.

    ``identity``: the dry input as output; ``gain``: the dry input times the least-squares
    gain (a linear level match, the best a "no effect" model can do).
    """
    out = training.stream(model, dry, BLOCK)
    gain = float(np.dot(dry, wet) / np.dot(dry, dry))
    return {
        "model": training.esr(out, wet),
        "identity": training.esr(dry, wet),
        "gain": training.esr(gain * dry, wet),
    }


def render_demo(model: torch.nn.Module, path: Path, rng: np.random.Generator) -> None:
    """Six seconds of a plucked riff through the model, input level rising from -30 to 0 dB."""
    riff = synth.riff(rng, 6.0)
    level = synth.db_to_gain(np.linspace(-30.0, 0.0, len(riff))).astype(np.float32)
    synth.write_flac(str(path), training.stream(model, riff * level, BLOCK))


def manifest(seconds: float, scores: dict[str, float]) -> dict:
    """The manifest.toml content, with the measured training time and ESRs."""
    ratios = {"in_channels": 1, "in_ratio": 1, "out_channels": 1, "out_ratio": 1}
    return {
        "name": "drive",
        "description": "Drive (Wiener-Hammerstein net): asymmetric soft clipping between a "
        "pre-emphasis, a 4 kHz tone filter and a DC blocker",
        "sample_rate": synth.SR,
        "channels": 1,
        "block": BLOCK,
        "latency": 0,
        "class": "model.py:DriveNet",
        "demo": "demo.flac",
        "preset": "drive",
        "kwargs": KWARGS,
        "methods": {"forward": ratios},
        "versions": {"default": "default.safetensors"},
        # baseline_esr: the dry input matched in level by a least-squares gain
        "training": {
            "script": "scripts/train_drive.py",
            "seconds": round(seconds, 1),
            "test_esr": scores["model"],
            "baseline_esr": scores["gain"],
        },
    }


def main() -> None:
    """Generate data, train, evaluate, write weights, demo and manifest."""
    args = training.parse_args("drive", "Train the drive effect.")
    rng = training.seed_everything(SEED)
    train_seconds, test_seconds = (8.0, 2.0) if args.quick else (150.0, 30.0)
    steps, segment = (10, 8192) if args.quick else (10000, 32768)
    start = time.time()
    dry, wet = make_data(rng, train_seconds)
    test_dry, test_wet = make_data(np.random.default_rng(SEED + 1), test_seconds)
    model_class = training.load_model_class(MODEL_FILE, "DriveNet")
    model = model_class(**KWARGS)
    print(
        f"DriveNet {KWARGS}: {training.count_parameters(model)} parameters, "
        f"receptive field {model.receptive_field} samples"
    )
    untrained = evaluate(model, test_dry, test_wet)["model"]
    train(model, dry, wet, rng, steps, segment)
    model.eval()
    scores = evaluate(model, test_dry, test_wet)
    seconds = time.time() - start
    args.out.mkdir(parents=True, exist_ok=True)
    if (args.out / "model.py").resolve() != MODEL_FILE:
        shutil.copy(MODEL_FILE, args.out / "model.py")
    training.save_weights(model, args.out / "default.safetensors")
    render_demo(model, args.out / "demo.flac", np.random.default_rng(SEED + 2))
    training.write_manifest(args.out / "manifest.toml", manifest(seconds, scores))
    print(f"trained in {seconds:.1f} s")
    print(
        f"test ESR {scores['model']:.4f}  (baselines: level-matched dry "
        f"{scores['gain']:.4f}, dry {scores['identity']:.4f}, untrained {untrained:.4f})"
    )


if __name__ == "__main__":
    main()
