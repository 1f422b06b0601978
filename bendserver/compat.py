"""The private torch details bendserver relies on, in one place (each tested in test_passes)."""

from __future__ import annotations

from torch import nn


def has_forward_hooks(module: nn.Module) -> bool:
    """True when ``module`` has its own forward or forward-pre hooks (torch has no public way to
    ask): an optimised graph calls such a module through ``__call__`` so that its hooks run."""
    return bool(module._forward_hooks or module._forward_pre_hooks)
