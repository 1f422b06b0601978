"""A model's latency, measured: the first output sample an input sample can change.

An impulse played through the model in forward-mode automatic differentiation (a tangent of 1
on the first sample of a block after the model's state as loaded, 0 elsewhere) carries the
exact dependence of each output sample on that input sample: the first output sample with a
non-zero tangent is the latency. Unlike comparing a run on silence with a run on an impulse,
it is not masked by float rounding where the model's response starts tiny (untrained weights,
tapered filters), and the model's own noise does not blur it (noise has no tangent).
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as forward_ad
from torch import nn

from . import restoring_buffers

#: Seconds of audio the probe plays at most before it says the output does not depend on the
#: input.
PROBE_SECONDS = 2.0


def measure_latency(
    module: nn.Module, method: str, channels: int, block: int, sample_rate: int
) -> int | None:
    """Samples between an impulse at the start of a block and the first output sample it
    changes, through ``module.<method>`` (audio in, audio out, ``channels`` in) on blocks of
    ``block`` samples; the module's buffers and torch's random state are as before. None when
    the output does not depend on the input within :data:`PROBE_SECONDS`, or the model cannot
    be differentiated (an op without a forward derivative)."""
    run = getattr(module, method)
    blocks = max(1, -(-round(PROBE_SECONDS * sample_rate) // block))
    zeros = torch.zeros(1, channels, block, device=_device(module))
    tangent = torch.zeros_like(zeros)
    tangent[..., 0] = 1.0
    try:
        with (
            restoring_buffers(module),
            torch.random.fork_rng(devices=[]),
            torch.no_grad(),
            torch.jit.optimized_execution(False),  # a TorchScript file: no plan for dual inputs
            forward_ad.dual_level(),
        ):
            for index in range(blocks):
                given = forward_ad.make_dual(zeros, tangent if index == 0 else zeros)
                changed = forward_ad.unpack_dual(run(given)).tangent
                if changed is None:
                    continue
                hits = torch.nonzero(changed.reshape(-1, changed.shape[-1]).abs().amax(0))
                if len(hits):
                    return index * block + int(hits[0])
    except (RuntimeError, NotImplementedError, torch.jit.Error):  # no derivative, or refused
        return None
    return None


def _device(module: nn.Module) -> torch.device:
    tensor = next(iter(module.parameters()), None)
    if tensor is None:
        tensor = next(iter(module.buffers()), None)
    return torch.device("cpu") if tensor is None else tensor.device
