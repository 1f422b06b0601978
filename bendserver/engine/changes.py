"""A node's control side: changes prepared from the pending state, submitted to its timeline.

Each method here runs on the calling (control) thread under the node's control lock: it checks
its arguments (a refused change changes nothing), prepares what the audio side will swap in
(weights, a rebuilt graph, ramps) and submits it for the next block or the block at ``at``.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..attributes import Attribute, shown
from ..bending.base import BendingOp
from ..bending.config import BendingConfig
from ..bending.weights import DEFAULT_VERSION
from ..errors import BendingError
from ..presets.fit import bent_targets, check_fit
from ..presets.library import Preset, load_preset
from ..slices import breathe
from ..tracing.script import ConversionError, setter_writes
from .state import BendingState, OpState, check_op_count
from .timeline import Change


class NodeControl:
    """The changes a controller asks of a node (``set_param``, ``add_op``, ``load_preset``,
    ...): each checked and prepared here, applied by the audio side at a block boundary."""

    def _submit(
        self,
        change: Change,
        at: int | None,
        what: str,
        ramps: dict[tuple[int, str], int] | None = None,
    ) -> None:
        """Put ``change`` on the timeline at sample ``at`` (None: the next block)."""
        with self._control:  # "the next block" is now, in the timeline's order
            self.timeline.submit(change, self.time if at is None else at, what, ramps)

    def set_param(
        self, op_id: str, name: str, value: float, ramp_ms: float = 0.0, at: int | None = None
    ) -> None:
        """Set an op parameter, moving there over ``ramp_ms`` (one step per block at least).

        Weights an op bends are recomputed with the new value and swapped in whole (weights
        jump: only activation parameters ramp)."""
        with self._control:
            op = self.state.op(op_id)
            value = self._bends.op(op.uid).param(name).validate(op_id, value)
            if not math.isfinite(ramp_ms) or ramp_ms < 0:
                raise BendingError(f"ramp must be a finite number of ms >= 0, got {ramp_ms!r}")
            blocks = math.ceil(ramp_ms * self.sample_rate / 1000 / self.block)

            def change(state: BendingState) -> BendingState:
                return state.with_op(state.op(op_id).with_param(name, value))

            self._submit(change, at, f"set {op_id}.{name}", {(op.uid, name): blocks})

    def _set_live(self, uid: int, name: str, value: float) -> None:
        """``op.name = value`` on a live op: the same path as :meth:`set_param`."""
        with self._control:
            op_id = next((op.op_id for op in self.state.ops if op.uid == uid), None)
            if op_id is None:
                raise BendingError("this op is not played by the engine any more")
            self.set_param(op_id, name, value)

    def add_op(self, op_id: str, op: BendingOp, *keys: str, at: int | None = None) -> None:
        """Bend ``keys`` with ``op`` under the name ``op_id``; the graph is rebuilt here and
        swapped in at a block boundary, keeping the streaming state."""
        with self._control, self._creating() as created:
            check_op_count(len(self.state.ops) + 1, f"adding '{op_id}'")
            added = self._bends.create(op_id, op, keys)
            created.append(added)
            self._submit(lambda state: state.adding(added), at, f"add {op_id}")

    def replace_op(self, op_id: str, op: BendingOp, at: int | None = None) -> None:
        """Play ``op`` in place of op ``op_id``, on its keys, in its place in the order and
        switched on or off as it is (the graph rebuilt here, swapped in at a block boundary)."""
        with self._control, self._creating() as created:
            old = self.state.op(op_id)
            op.enabled = old.enabled
            new = self._bends.create(op_id, op, old.keys)
            created.append(new)
            self._submit(lambda state: state.with_op(new), at, f"replace {op_id}")

    @contextlib.contextmanager
    def _creating(self) -> Iterator[list[OpState]]:
        """Ops created for a change are forgotten again if the change is refused."""
        created: list[OpState] = []
        try:
            yield created
        except BaseException:
            self._bends.discard(op.uid for op in created)
            raise

    def remove_op(self, op_id: str, at: int | None = None) -> None:
        self.state.op(op_id)
        self._submit(lambda state: state.removing(op_id), at, f"remove {op_id}")

    def clear_ops(self, at: int | None = None) -> None:
        self._submit(lambda state: replace(state, ops=()), at, "clear")

    def enable_op(self, op_id: str, enabled: bool, at: int | None = None) -> None:
        """Switch an op on or off (off: it passes its input through)."""
        enabled = bool(enabled)

        def change(state: BendingState) -> BendingState:
            return state.with_op(replace(state.op(op_id), enabled=enabled))

        self.state.op(op_id)
        self._submit(change, at, f"enable {op_id}")

    def set_interpolation(self, mix: Mapping[str, float] | None, at: int | None = None) -> None:
        """Use a normalised mix of weight versions (``None``: the selected version alone)."""
        weights = None if mix is None else self.bended.weight_bank.normalised(mix)
        self._submit(lambda state: state.weights(state.version, weights), at, "interpolation")

    def set_version(self, name: str | None, at: int | None = None) -> None:
        """Play weight version ``name`` (None: the model's own), ending any interpolation."""
        version = self.bended.weight_bank.default_name if name is None else name
        self.bended.weight_bank.check_version(version)
        self._submit(lambda state: state.weights(version, None), at, f"version {version}")

    def set_attribute(self, name: str, values: Any, at: int | None = None) -> None:
        """Set an nn~ TorchScript file's attribute (its ``set_<name>``) at a block boundary:
        ``values`` (a value, or a sequence of one per value the setter takes) typed as its
        setter takes them, a sound file read for a tensor or buffer
        (:mod:`bendserver.attributes`). A value the file's setter refuses (it returns -1) is
        refused here, changing nothing."""
        spec = self.attribute_spec(name)
        typed = spec.parse(list(values) if isinstance(values, (list, tuple)) else [values])
        try:
            _, code = setter_writes(
                self.model.module, name, spec.arguments(typed), self.bended.script_attributes
            )
        except ConversionError:  # a setter the converter cannot follow: its code is seen later
            code = 0
        if isinstance(code, int) and code < 0:
            shown_values = " ".join(str(shown(v)) for v in typed)
            raise BendingError(f"the file's set_{name} refuses {shown_values} (it returned {code})")
        self._submit(lambda state: state.with_attribute(name, typed), at, f"attribute {name}")

    def attribute(self, name: str) -> tuple[Any, ...]:
        """An attribute's pending values (the file's own, from its getter, until set)."""
        spec = self.attribute_spec(name)
        pending = dict(self.state.attributes)
        return pending[name] if name in pending else spec.read(self.model.module)

    def attribute_spec(self, name: str) -> Attribute:
        """The description of the file's attribute ``name`` (refused where there is none)."""
        spec = self.model.attributes.get(name)
        if spec is None:
            listed = ", ".join(self.model.attributes) or "none"
            raise BendingError(f"no attribute '{name}'; this model's attributes: {listed}")
        return spec

    def set_gain(self, gain: float, at: int | None = None) -> None:
        gain = _finite("gain", gain, 0.0, 16.0)
        self._submit(lambda state: state.engine(gain=gain), at, "gain")

    def set_mix(self, mix: float, at: int | None = None) -> None:
        mix = _finite("mix", mix, 0.0, 1.0)
        self._submit(lambda state: state.engine(mix=mix), at, "mix")

    def set_bypass(self, bypass: bool, at: int | None = None) -> None:
        bypass = bool(bypass)
        self._submit(lambda state: state.engine(bypass=bypass), at, "bypass")

    def request_reset(self, at: int | None = None) -> None:
        """Clear the streaming state at a block boundary."""
        self._submit(lambda state: state.engine(resets=state.resets + 1), at, "reset")

    def load_preset(self, preset: str | Path | Preset, at: int | None = None) -> Preset:
        """Replace the ops, weights and engine settings with a preset's. The whole preset is
        checked and built first: a refused preset changes nothing."""
        checked = self._checked(preset)
        config, preset = checked.config, checked.preset
        keys: dict[int, list[str]] = {}
        for op, op_keys in config.entries:
            keys.setdefault(id(op), []).extend(op_keys)
        with self._control, self._creating() as ops:
            for op_id, op in config.ops.items():
                breathe()
                ops.append(self._bends.create(op_id, op, tuple(keys[id(op)])))
            disabled = set(preset.disabled)
            loaded = tuple(_enabled(op, op.op_id not in disabled) for op in ops)

            def change(state: BendingState) -> BendingState:
                new = replace(state, ops=loaded, gain=checked.gain, mix=checked.mix)
                for name, values in checked.attributes:
                    new = new.with_attribute(name, values)
                return new.weights(checked.version, checked.interpolation)

            self._submit(change, at, f"preset {preset.name}")
        return preset

    def check_preset(self, preset: str | Path | Preset) -> Preset:
        """The preset, read and checked against this node's model (ops, weights, version,
        interpolation, gain and mix): a BendingError says what does not fit, changing nothing."""
        return self._checked(preset).preset

    def _checked(self, preset: str | Path | Preset) -> _CheckedPreset:
        preset = preset if isinstance(preset, Preset) else load_preset(preset)
        if preset.nodes:  # its parts are nodes' own: a rack gives each its own
            raise BendingError(
                f"preset '{preset.name}' is a rack's (it sets nodes {', '.join(preset.nodes)}): "
                "load it into a rack of those nodes, or give this node one model's preset"
            )
        listed = preset.config.get("ops") if isinstance(preset.config, dict) else None
        check_op_count(len(listed) if isinstance(listed, dict) else 0, f"preset '{preset.name}'")
        config = BendingConfig.from_dict(preset.config)
        check_fit(preset, config, self.bended, self.model.name)
        bank = self.bended.weight_bank
        version = preset.version or bank.default_name
        bank.check_version(version)
        interpolation = bank.normalised(preset.interpolation) if preset.interpolation else None
        gain, mix = _finite("gain", preset.gain, 0.0, 16.0), _finite("mix", preset.mix, 0.0, 1.0)
        attributes = []
        for name, values in preset.attributes.items():
            try:
                attributes.append((name, self.attribute_spec(name).parse(values)))
            except BendingError as error:
                raise BendingError(f"preset '{preset.name}': {error}") from None
        return _CheckedPreset(preset, config, version, interpolation, gain, mix, tuple(attributes))

    def bending_config(self, at: int | None = None) -> BendingConfig:
        """The bends of the pending state (or of the state at sample ``at``) as a config with
        the engine's op ids: copies of the ops, with that state's parameters."""
        with self._control:
            state = self.state_at(at)
            ops = {op.op_id: copy.deepcopy(self._bends.twin(op)) for op in state.ops}
            entries = [(ops[op.op_id], *op.keys) for op in state.ops]
            return BendingConfig(*entries, module=self.bended, names=ops)

    def preset(self, name: str, at: int | None = None) -> Preset:
        """The pending state (or the state at sample ``at``) as a preset named ``name``."""
        with self._control:
            state = self.state_at(at)
            own = self.bended.weight_bank.default_name  # saved as _default: it fits a renamed file
            return Preset(
                name=name,
                config=self.bending_config(at).to_dict(),
                version=None if state.version == own else state.version,
                interpolation=None
                if state.interpolation is None
                else {
                    DEFAULT_VERSION if v == own else v: w for v, w in state.interpolation.items()
                },
                gain=state.gain,
                mix=state.mix,
                model=self.model.name,
                disabled=[op.op_id for op in state.ops if not op.enabled],
                targets=bent_targets(self.bended, (k for op in state.ops for k in op.keys)),
                attributes={name: [shown(v) for v in values] for name, values in state.attributes},
            )


@dataclass(frozen=True)
class _CheckedPreset:
    """A preset checked against a node's model, with what loading it needs."""

    preset: Preset
    config: BendingConfig
    version: str
    interpolation: dict[str, float] | None
    gain: float
    mix: float
    attributes: tuple[tuple[str, tuple[Any, ...]], ...] = ()


def _enabled(op: OpState, enabled: bool) -> OpState:
    """``op`` switched on or off (a slice of a long preset load)."""
    breathe()
    return op if op.enabled == enabled else replace(op, enabled=enabled)


def _finite(name: str, value: Any, low: float, high: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BendingError(f"{name} takes a number, got {value!r}") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise BendingError(f"{name} must be in [{low}, {high}], got {value!r}")
    return number
