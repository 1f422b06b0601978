"""A table of module kinds: each traces to a graph equal to eager PyTorch, and stays equal with
Scale(1) and Bias(0) on every activation (so op insertion reaches every consumer correctly)."""

import pytest
import torch
from streaming import CachedConv
from torch import nn

import bendserver as tb


class ConvStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(1, 8, 5, padding=2),
            nn.Tanh(),
            nn.Conv1d(8, 8, 3, dilation=2),
            nn.ReLU(),
            nn.Conv1d(8, 1, 1),
        )

    def forward(self, x):
        return self.net(x)


class Conv2dStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(2, 6, 3, padding=1)
        self.b = nn.Conv2d(6, 2, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class TransposedStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.Conv1d(1, 4, 4, stride=2)
        self.up = nn.ConvTranspose1d(4, 1, 4, stride=2)

    def forward(self, x):
        return self.up(nn.functional.leaky_relu(self.down(x), 0.2))


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 5, batch_first=True)
        self.lstm = nn.LSTM(5, 4, batch_first=True)

    def forward(self, x):
        y, h = self.gru(x)
        z, (hn, cn) = self.lstm(y)
        return z + hn.transpose(0, 1) + cn.transpose(0, 1) + h.sum()


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x)


class Residual(nn.Module):
    """Residual blocks consuming activations inside lists and keyword arguments."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(2, 2, 3, padding=1)
        self.b = nn.Conv1d(4, 2, 1)

    def forward(self, x):
        h = self.a(x)
        cat = torch.cat([h, x], dim=1)
        y = self.b(cat)
        return torch.add(input=y, other=h, alpha=0.5) + {"skip": x}["skip"]


class StreamingStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = CachedConv(channels=2)
        self.c2 = CachedConv(channels=2)
        self.register_buffer("acc", torch.zeros(1, 2, 4))

    def forward(self, x):
        y = torch.tanh(self.c1(x))
        n = self.acc.shape[-1]
        y[..., :n] += self.acc[..., :n]
        self.acc.copy_(y[..., -n:] * 0.5)
        return self.c2(y)


class ShapeFlow(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x):
        if x.shape[-1] > 4:
            x = self.proj(x)
        for i in range(x.shape[0]):
            x = x + float(i)
        return x * len(x)


KINDS = {
    "conv1d": (ConvStack, (1, 1, 64)),
    "conv2d": (Conv2dStack, (1, 2, 10, 12)),
    "conv_transpose1d": (TransposedStack, (1, 1, 32)),
    "gru_lstm": (Recurrent, (2, 7, 3)),
    "transformer": (Transformer, (2, 5, 8)),
    "residual_cat_kwargs": (Residual, (1, 2, 16)),
    "streaming_cached_conv": (StreamingStack, (1, 2, 32)),
    "shape_control_flow": (ShapeFlow, (3, 6)),
}


def _pair(kind):
    cls, shape = KINDS[kind]
    torch.manual_seed(0)
    module = cls().eval()
    reference = cls().eval()
    reference.load_state_dict(module.state_dict())
    return module, reference, shape


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ops", [None, "scale", "bias"])
def test_traced_module_matches_eager(kind, ops):
    module, reference, shape = _pair(kind)
    bended = tb.BendedModule(module)
    bended.trace(x=torch.randn(shape))
    if ops == "scale":
        bended.bend(tb.Scale(1.0), ".*")
    elif ops == "bias":
        bended.bend(tb.Bias(0.0), ".*")
    if ops:
        inserted = [n for n in bended.bend_graph().nodes if str(n.target).startswith("bend_")]
        assert len(inserted) == len(bended.activation_names()) > 0
    with torch.no_grad():
        for _ in range(3):  # several calls: streaming state must evolve as in eager
            x = torch.randn(shape)
            torch.testing.assert_close(bended(x), reference(x), rtol=0, atol=1e-6)


def test_streaming_stack_block_by_block_against_eager():
    module, reference, _ = _pair("streaming_cached_conv")
    bended = tb.BendedModule(module)
    bended.trace(x=torch.randn(1, 2, 32))
    assert torch.count_nonzero(module.c1.cache) == 0, "tracing must leave the caches as found"
    signal = torch.randn(1, 2, 32 * 8)
    with torch.no_grad():
        streamed = torch.cat([bended(block) for block in signal.split(32, -1)], -1)
        eager = torch.cat([reference(block) for block in signal.split(32, -1)], -1)
    torch.testing.assert_close(streamed, eager, rtol=0, atol=1e-6)
    assert not torch.equal(module.c1.cache, torch.zeros_like(module.c1.cache))


def test_plain_fx_rejects_the_streaming_stack():
    with pytest.raises(TypeError):
        torch.fx.symbolic_trace(StreamingStack())
