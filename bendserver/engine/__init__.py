"""The streaming engine: bended graphs run block by block, control applied between blocks."""

from .engine import StreamEngine
from .fifo import BlockAdapter
from .fuse import OutputFuse

__all__ = ["BlockAdapter", "OutputFuse", "StreamEngine"]
