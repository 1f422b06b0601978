"""Small streaming models shared by the engine tests."""

import time

import torch
from torch import nn


class CachedConv(nn.Module):
    """A causal convolution whose past input lives in a buffer updated in place."""

    def __init__(self, channels=1, kernel=5):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel)
        self.register_buffer("cache", torch.zeros(1, channels, kernel - 1))

    def forward(self, x):
        x = torch.cat([self.cache, x], -1)
        self.cache.copy_(x[..., -self.cache.shape[-1] :])
        return self.conv(x)


class CausalStack(nn.Module):
    """Two cached convolutions around a tanh: a tiny streaming effect."""

    def __init__(self, channels=1):
        super().__init__()
        self.first = CachedConv(channels)
        self.act = nn.Tanh()
        self.second = CachedConv(channels)

    def forward(self, x):
        return self.second(self.act(self.first(x)))


class Identity(nn.Module):
    """Passes audio through through a 1x1 convolution of weight 1 (so it has a weight)."""

    def __init__(self):
        super().__init__()
        self.gain = nn.Conv1d(1, 1, 1, bias=False)
        nn.init.ones_(self.gain.weight)

    def forward(self, x):
        return self.gain(x)


def twin(module_class, **kwargs):
    """Two modules of the class with the same weights: one to bend, one as eager reference."""
    torch.manual_seed(0)
    first = module_class(**kwargs).eval()
    second = module_class(**kwargs).eval()
    second.load_state_dict(first.state_dict())
    return first, second


def pause(x):
    """Waits 20 ms: a model call as slow as a large model's, kept in the traced graph."""
    time.sleep(0.02)
    return x


torch.fx.wrap("pause")


class Slow(nn.Module):
    """Halves its input, 20 ms a block: a render that lasts long enough to interrupt."""

    def forward(self, x):
        return pause(x) * 0.5


class Noisy(nn.Module):
    """Adds noise drawn from torch's global generator each block, as RAVE's encoder samples."""

    def forward(self, x):
        return x + 0.1 * torch.randn_like(x)


class Ratio(nn.Module):
    """``x / x``: 1 where the input is not 0, NaN where it is (a model that outputs NaN)."""

    def forward(self, x):
        return x / x
