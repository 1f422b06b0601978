"""What the CUDA path does on this machine's GPU: the CUDA tests, then per model and block the
engine as a CUDA graph and as eager CUDA against the CPU in the same run (``bendserver bench``),
and how far the GPU's output is from the CPU's.

    python scripts/cuda_check.py OUT_DIR [MODEL[@BLOCKS] ...]

MODEL is a shipped model's name or a ``.ts`` path; BLOCKS like ``128,256,2048`` (the default).
Each step writes its own file in OUT_DIR as it ends, so a run cut short keeps what it finished.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_MODELS = ["drive", "wavae"]
DEFAULT_BLOCKS = "128,256,2048"
CALLS = "200"


def run(out: Path, name: str, command: list[str], limit: float) -> None:
    """Run ``command``, its output into ``out/name`` (its log beside, ``.log``), cut at ``limit``
    seconds."""
    start = time.perf_counter()
    with open(out / name, "w") as output, open(out / f"{name}.log", "w") as log:
        try:
            code = subprocess.run(command, stdout=output, stderr=log, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            code = "timed out"
    print(f"{name}: {code} in {time.perf_counter() - start:.0f} s", flush=True)


def distance(model: str, block: int, blocks: int = 8) -> float:
    """Largest difference between the engine's output as a CUDA graph and on the CPU over
    ``blocks`` blocks, relative to the CPU's peak (a model that draws no noise)."""
    import numpy as np

    import bendserver as tb

    gpu = tb.StreamEngine(model, block=block, fuse=False, device="cuda")
    cpu = tb.StreamEngine(model, block=block, fuse=False)
    rng = np.random.default_rng(0)
    worst, peak = 0.0, 0.0
    for _ in range(blocks):
        audio = (0.3 * rng.standard_normal((cpu.in_channels, block))).astype(np.float32)
        want = cpu.process(audio)
        worst = max(worst, float(np.abs(gpu.process(audio) - want).max()))
        peak = max(peak, float(np.abs(want).max()))
    return worst / max(peak, 1e-12)


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    models = argv[1:] or DEFAULT_MODELS
    python = [sys.executable]
    env_line = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv"],
        capture_output=True,
        text=True,
    ).stdout
    import torch

    (out / "machine.txt").write_text(
        f"{env_line}torch {torch.__version__} cuda {torch.version.cuda} "
        f"cudnn {torch.backends.cudnn.version()} cpus {os.cpu_count()}\n"
    )
    run(
        out,
        "tests.txt",
        [
            *python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_cuda.py",
            "tests/test_engine.py",
            "-k",
            "cuda",
        ],
        240,
    )
    distances = {}
    for entry in models:
        model, _, blocks = entry.partition("@")
        blocks = blocks or DEFAULT_BLOCKS
        stem = Path(model).stem
        for device in ("cuda", "cpu"):
            run(
                out,
                f"bench-{stem}-{device}.json",
                [
                    *python,
                    "-m",
                    "bendserver",
                    "bench",
                    "-m",
                    model,
                    "--block",
                    blocks,
                    "--calls",
                    CALLS,
                    "--apply-sizes",
                    "0",
                    "--device",
                    device,
                    "--json",
                ],
                300,
            )
        if not model.endswith(".ts"):  # the RAVE exports draw noise: their test seeds both
            distances[stem] = distance(model, int(blocks.split(",")[-1]))
            (out / "distances.json").write_text(json.dumps(distances, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
