"""Models built from the cached-conv package's streaming layers trace exactly: block by block
equal to eager PyTorch, and again after a reset.

cached_conv makes each layer's cache on its first call (``register_buffer`` inside forward);
traced as it was, that became a fresh zero cache in every call, so the stream lost its past
from the second block on (1e-6 off at the first block, 1.5e-3 by the fourth on a RAVE-like
decoder). The tracer now runs the model once before tracing so that this state is real.
"""

import copy

import numpy as np
import pytest
import torch
from torch import nn

import bendserver as tb

cc = pytest.importorskip("cached_conv", reason="cached-conv is installed by make install")


def decoder() -> nn.Module:
    """A small RAVE-like streaming decoder: cached convs, a cached transposed conv (upsampling),
    aligned residual branches, a centered (non-causal) conv with its reported delay."""
    cc.use_cached_conv(True)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.pre = cc.Conv1d(8, 16, 3, padding=cc.get_padding(3))
            self.up = cc.ConvTranspose1d(16, 8, 4, stride=2, padding=1)
            self.res = cc.AlignBranches(
                cc.Conv1d(8, 8, 3, padding=cc.get_padding(3), dilation=1),
                cc.Conv1d(8, 8, 1),
            )
            self.post = cc.Conv1d(8, 1, 5, padding=cc.get_padding(5, mode="centered"))

        def forward(self, z):
            z = torch.tanh(self.pre(z))
            a, b = self.res(self.up(z))
            return self.post(a + b)

    torch.manual_seed(0)
    return Decoder().eval()


@pytest.mark.parametrize("frames", [16, 64])
def test_traced_streams_equal_eager_and_reset_restores_the_start(frames):
    model = decoder()
    reference = copy.deepcopy(model)
    bended = tb.BendedModule(model)
    bended.trace(z=torch.zeros(1, 8, frames))
    blocks = [torch.randn(1, 8, frames) for _ in range(8)]
    with torch.no_grad():
        traced = [bended(b) for b in blocks]
        eager = [reference(b) for b in blocks]
    for index, (got, want) in enumerate(zip(traced, eager, strict=True)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0, msg=f"block {index}")
    with torch.no_grad():
        for buffer in bended.streaming_state():
            buffer.zero_()  # cached_conv's state starts at zero
        fresh = copy.deepcopy(decoder())
        again = [bended(b) for b in blocks]
        eager_again = [fresh(b) for b in blocks]
    for got, want in zip(again, eager_again, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_the_engine_streams_a_cached_conv_model_and_resets_exactly():
    class Voice(nn.Module):  # audio in, audio out, through cached convs
        def __init__(self):
            super().__init__()
            cc.use_cached_conv(True)
            self.a = cc.Conv1d(1, 8, 5, padding=cc.get_padding(5, mode="causal"))
            self.b = cc.Conv1d(8, 1, 3, padding=cc.get_padding(3, mode="causal"))

        def forward(self, x):
            return self.b(torch.tanh(self.a(x)))

    torch.manual_seed(1)
    model = Voice().eval()
    reference = copy.deepcopy(model)
    engine = tb.StreamEngine(model, block=256, fuse=False)
    signal = np.random.default_rng(2).standard_normal((1, 256 * 8)).astype(np.float32)
    blocks = np.split(signal, 8, axis=-1)
    first = [engine.process(b) for b in blocks]
    with torch.no_grad():
        eager = [reference(torch.from_numpy(b)[None])[0].numpy() for b in blocks]
    for got, want in zip(first, eager, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)
    engine.reset_state()
    again = [engine.process(b) for b in blocks]
    for got, want in zip(again, first, strict=True):
        np.testing.assert_array_equal(got, want)
