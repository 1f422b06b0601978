"""What a controller drives: the control target a node is and a rack of one node answers for.

:class:`ControlTarget` is the one interface :class:`~bendserver.control.Controller` calls: set
(ops, parameters, versions, attributes, gain, mix, bypass, reset), get (the applied and pending
state, an op, an attribute), list (versions, weights and activations through ``bended``) and load
(presets). A :class:`~bendserver.engine.node.Node` implements it; a rack implements it through
:class:`RackTarget`, each method its one node's (a rack of several nodes refuses, naming them:
a message for one of them goes to ``/<node>/...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import BendingError

if TYPE_CHECKING:
    from ..attributes import Attribute
    from ..bending.base import BendingOp
    from ..bending.config import BendingConfig
    from ..bending.module import BendedModule
    from ..loader import LoadedModel
    from ..presets.library import Preset
    from .node import Node
    from .state import BendingState


class ControlTarget(Protocol):
    """The calls a controller makes (each change at the next block, or at sample ``at``)."""

    time: int
    sample_rate: int

    def samples(self, seconds: float) -> int: ...
    def stats_dict(self) -> dict[str, float]: ...

    # set
    def set_param(
        self, op_id: str, name: str, value: float, ramp_ms: float = 0.0, at: int | None = None
    ) -> None: ...
    def enable_op(self, op_id: str, enabled: bool, at: int | None = None) -> None: ...
    def add_op(self, op_id: str, op: BendingOp, *keys: str, at: int | None = None) -> None: ...
    def remove_op(self, op_id: str, at: int | None = None) -> None: ...
    def clear_ops(self, at: int | None = None) -> None: ...
    def set_interpolation(self, mix: Mapping[str, float] | None, at: int | None = None) -> None: ...
    def set_version(self, name: str | None, at: int | None = None) -> None: ...
    def set_attribute(self, name: str, values: Any, at: int | None = None) -> None: ...
    def set_gain(self, gain: float, at: int | None = None) -> None: ...
    def set_mix(self, mix: float, at: int | None = None) -> None: ...
    def set_bypass(self, bypass: bool, at: int | None = None) -> None: ...
    def request_reset(self, at: int | None = None) -> None: ...

    # get
    @property
    def state(self) -> BendingState: ...
    @property
    def applied_state(self) -> BendingState: ...
    def op(self, op_id: str) -> BendingOp: ...
    def attribute(self, name: str) -> tuple[Any, ...]: ...
    def attribute_spec(self, name: str) -> Attribute: ...

    # list
    @property
    def versions(self) -> list[str]: ...
    @property
    def bended(self) -> BendedModule: ...
    @property
    def model(self) -> LoadedModel: ...
    @property
    def method(self) -> str: ...

    # load
    def load_preset(self, preset: str | Path | Preset, at: int | None = None) -> Preset: ...
    def check_preset(self, preset: str | Path | Preset) -> Preset: ...
    def preset(self, name: str, at: int | None = None) -> Preset: ...
    def bending_config(self, at: int | None = None) -> BendingConfig: ...


class RackTarget:
    """A rack's :class:`ControlTarget`: each call its one node's (``/bend/...``, ``/attr/...``
    sent to the rack, however the node was named); a rack of several nodes refuses."""

    nodes: Mapping[str, Node]
    names: str

    def _only(self) -> Node:
        if len(self.nodes) == 1:
            return next(iter(self.nodes.values()))
        raise BendingError(
            f"this rack plays several nodes ({self.names}): send this to one of them, /<node>/..."
        )

    def set_param(
        self, op_id: str, name: str, value: float, ramp_ms: float = 0.0, at: int | None = None
    ) -> None:
        self._only().set_param(op_id, name, value, ramp_ms, at)

    def enable_op(self, op_id: str, enabled: bool, at: int | None = None) -> None:
        self._only().enable_op(op_id, enabled, at)

    def add_op(self, op_id: str, op: BendingOp, *keys: str, at: int | None = None) -> None:
        self._only().add_op(op_id, op, *keys, at=at)

    def remove_op(self, op_id: str, at: int | None = None) -> None:
        self._only().remove_op(op_id, at)

    def clear_ops(self, at: int | None = None) -> None:
        self._only().clear_ops(at)

    def set_interpolation(self, mix: Mapping[str, float] | None, at: int | None = None) -> None:
        self._only().set_interpolation(mix, at)

    def set_version(self, name: str | None, at: int | None = None) -> None:
        self._only().set_version(name, at)

    def set_attribute(self, name: str, values: Any, at: int | None = None) -> None:
        self._only().set_attribute(name, values, at)

    def set_gain(self, gain: float, at: int | None = None) -> None:
        self._only().set_gain(gain, at)

    def set_mix(self, mix: float, at: int | None = None) -> None:
        self._only().set_mix(mix, at)

    def set_bypass(self, bypass: bool, at: int | None = None) -> None:
        self._only().set_bypass(bypass, at)

    def request_reset(self, at: int | None = None) -> None:
        self._only().request_reset(at)

    @property
    def state(self) -> BendingState:
        return self._only().state

    @property
    def applied_state(self) -> BendingState:
        return self._only().applied_state

    def op(self, op_id: str) -> BendingOp:
        return self._only().op(op_id)

    @property
    def ops(self) -> dict[str, BendingOp]:
        return self._only().ops

    def attribute(self, name: str) -> tuple[Any, ...]:
        return self._only().attribute(name)

    def attribute_spec(self, name: str) -> Attribute:
        return self._only().attribute_spec(name)

    @property
    def versions(self) -> list[str]:
        return self._only().versions

    @property
    def bended(self) -> BendedModule:
        return self._only().bended

    @property
    def model(self) -> LoadedModel:
        return self._only().model

    def load_preset(self, preset: str | Path | Preset, at: int | None = None) -> Preset:
        return self._only().load_preset(preset, at)

    def check_preset(self, preset: str | Path | Preset) -> Preset:
        return self._only().check_preset(preset)

    def preset(self, name: str, at: int | None = None) -> Preset:
        return self._only().preset(name, at)

    def bending_config(self, at: int | None = None) -> BendingConfig:
        return self._only().bending_config(at)
