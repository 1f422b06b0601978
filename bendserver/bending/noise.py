"""Counter-based Gaussian noise: each value a hash of its lane and its time step, not a draw.

Fresh noise drawn from a generator block by block depends on how the stream is cut: a block of
2048 steps takes its values in another order than eight blocks of 256. Here the value at time
step ``t`` (the last axis, counted from the start of the stream) of lane ``l`` (every other
index) is a fixed function of the seed, the target, ``l`` and ``t``: the same stream gets the
same noise whatever the block size, on any device, with no generator state to capture. A block
costs a few in-place integer ops on buffers made once, with no allocation.
"""

from __future__ import annotations

import math

import torch

from .base import State, seeded_generator

#: Values are 32-bit unsigned integers held in int64 (exact on every device: products of a value
#: and a multiplier below 2**31 stay under 2**63).
MASK = 0xFFFFFFFF
#: The mixing rounds, (shift, multiplier): a bijection of 32-bit integers with good avalanche.
ROUNDS = ((16, 0x21F0AAAD), (15, 0x735A2D97))
FINAL_SHIFT = 15


def noise_state(seed: int, target: str, shape: list[int], dtype: torch.dtype, device) -> State:
    """Buffers to draw noise of ``shape`` block after block (time on the last axis; a 0-d
    shape: one value a call)."""
    given, shape = list(shape), list(shape) or [1]
    generator = seeded_generator(seed, target, "cpu")
    keys = torch.randint(0, MASK + 1, [*shape[:-1], 1], generator=generator, dtype=torch.int64)
    steps = torch.arange(shape[-1], dtype=torch.int64).reshape([1] * (len(shape) - 1) + [-1])

    def integer(value: int) -> torch.Tensor:  # constants as tensors: a Python number in an op
        return torch.tensor(value, dtype=torch.int64, device=device)  # is a tensor made per call

    def real(value: float) -> torch.Tensor:
        return torch.tensor(value, dtype=dtype, device=device)

    noise = torch.empty(shape, dtype=dtype, device=device)
    return {
        "keys": keys.to(device),
        "steps": steps.to(device),
        "position": integer(0),
        "index": torch.empty(steps.shape, dtype=torch.int64, device=device),
        "bits": torch.empty(shape, dtype=torch.int64, device=device),
        "scratch": torch.empty(shape, dtype=torch.int64, device=device),
        "noise": noise,
        "out": noise.view(given),  # what draw returns: a view made once
        "frames": integer(shape[-1]),
        "mask": integer(MASK),
        "rounds": [(integer(s), integer(m)) for s, m in ROUNDS],
        "final": integer(FINAL_SHIFT),
        "bits24": integer(8),
        "scale": real(2.0**-23),
        "offset": real(2.0**-24 - 1),
        "sqrt2": real(math.sqrt(2)),
    }


def draw(state: State) -> torch.Tensor:
    """The next block of standard normal noise (written into the state's buffer, returned)."""
    index, bits, scratch, noise = state["index"], state["bits"], state["scratch"], state["noise"]
    mask = state["mask"]
    torch.add(state["steps"], state["position"], out=index)
    state["position"].add_(state["frames"])
    torch.bitwise_xor(state["keys"], index.bitwise_and_(mask), out=bits)
    for shift, multiplier in state["rounds"]:
        torch.bitwise_right_shift(bits, shift, out=scratch)
        bits.bitwise_xor_(scratch).mul_(multiplier).bitwise_and_(mask)
    torch.bitwise_right_shift(bits, state["final"], out=scratch)
    bits.bitwise_xor_(scratch).bitwise_right_shift_(state["bits24"])  # 24 bits: exact in float32
    # (2k + 1) / 2**24 - 1: uniform in (-1, 1), never an end, so erfinv stays finite
    noise.copy_(bits).mul_(state["scale"]).add_(state["offset"]).erfinv_().mul_(state["sqrt2"])
    return state["out"]
