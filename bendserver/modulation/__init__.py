"""Modulators: control sources that run on the audio side (docs/modulation.md).

An LFO, a smoothed random drift, a tempo-synced step sequence, an envelope follower (of the
input or of a node's output) and a triggered attack/hold/release envelope, each driving any
number of op parameters (on activations) or node output gains and mixes through routes with a
depth and a range. Their state is changed on the control side (``/mod/...``) and played per
block by the rack, so that a render plays them as live.
"""

from .kinds import KINDS, Modulator
from .modulators import Modulators, exercised, modulators_of
from .state import ModState, Route

__all__ = ["KINDS", "ModState", "Modulator", "Modulators", "Route", "exercised", "modulators_of"]
