"""The control address space: OSC-style messages turned into engine commands.

One table (:data:`ADDRESSES`) is the single source for what the server accepts, for ``/list``,
for docs/osc.md and for the checks on the shipped patches. :class:`Controller.dispatch`
validates a message, submits the engine command (applied at the next block, or at sample
``at``) and returns the replies to send. Every number may arrive as a float (Pure Data sends
nothing else): integer and flag arguments accept floats.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bending.ops import OPS
from .engine import StreamEngine
from .errors import BendingError
from .loader import PRESETS_DIR
from .presets import Preset, preset_path, save_preset

Reply = tuple[str, list[Any]]


@dataclass(frozen=True)
class Address:
    """One entry of the address space: pattern, arguments, effect."""

    pattern: str
    args: str
    effect: str


ADDRESSES: tuple[Address, ...] = (
    Address("/bend/<id>/<param>", "value [ramp_ms]", "set an op parameter, ramped over ramp_ms"),
    Address("/bend/<id>/enable", "0|1", "switch an op off (pass-through) or on"),
    Address(
        "/bend/add",
        "id Op key [param value ...]",
        "add an op on the weights/activations matching key (graph rebuilt off the audio thread)",
    ),
    Address("/bend/remove", "id", "remove an op"),
    Address("/bend/clear", "", "remove every op"),
    Address("/interp", "version weight [version weight ...]", "weights of the version mix"),
    Address("/version", "name", "switch weight version (stops interpolating)"),
    Address("/preset/load", "name", "load patches/presets/<name>.json"),
    Address("/preset/save", "name", "save the current bending as patches/presets/<name>.json"),
    Address("/engine/gain", "value", "output gain, 0..16"),
    Address("/engine/mix", "value", "dry/wet mix, 0 (dry) .. 1 (wet)"),
    Address("/engine/bypass", "0|1", "pass the input through"),
    Address("/engine/reset", "", "clear the streaming state"),
    Address("/list", "[weights|activations|bends|versions|ops|addresses]", "reply with names"),
    Address("/get/<address>", "", "reply with a current value, e.g. /get/bend/mask/prob"),
    Address("/stats", "", "reply: blocks N late N errors N p50_ms F p99_ms F max_ms F ..."),
    Address("/ping", "", "reply /pong"),
)

_ID = re.compile(r"[A-Za-z_]\w*")


class Controller:
    """Applies control messages to one engine."""

    def __init__(self, engine: StreamEngine, presets: Path = PRESETS_DIR) -> None:
        self.engine = engine
        self.presets = presets

    def dispatch(
        self, address: str, args: Sequence[Any] = (), at: int | None = None
    ) -> list[Reply]:
        """Apply one message; returns replies. Raises BendingError on a bad message."""
        parts = address.strip("/").split("/")
        head, rest = parts[0], parts[1:]
        handler = getattr(self, f"_{head}", None) if _ID.fullmatch(head or "-") else None
        if handler is None:
            raise BendingError(f"unknown address {address}; send /list addresses for the list")
        return handler(rest, list(args), at) or []

    # -- handlers: (path after the head, args, at) -> replies --------------------------------

    def _bend(self, rest: list[str], args: list[Any], at: int | None) -> list[Reply]:
        engine = self.engine
        if rest == ["add"]:
            _need(args, 3, "/bend/add id Op key [param value ...]")
            op_id, op_name, key, extra = str(args[0]), str(args[1]), str(args[2]), args[3:]
            if op_name not in OPS:
                raise BendingError(f"unknown op {op_name!r}; ops: {sorted(OPS)}")
            if len(extra) % 2:
                raise BendingError("/bend/add takes param value pairs after the key")
            kwargs = {str(k): _option(v) for k, v in zip(extra[::2], extra[1::2], strict=True)}
            try:
                op = OPS[op_name](**kwargs)
            except TypeError as error:
                raise BendingError(f"bad arguments for {op_name}: {error}") from None
            engine.add_op(op_id, op, key, at=at)
        elif rest == ["remove"]:
            _need(args, 1, "/bend/remove id")
            engine.remove_op(str(args[0]), at=at)
        elif rest == ["clear"]:
            engine.clear_ops(at=at)
        elif len(rest) == 2 and rest[1] == "enable":
            _need(args, 1, f"/bend/{rest[0]}/enable 0|1")
            engine.enable_op(rest[0], _flag(args[0]), at=at)
        elif len(rest) == 2:
            _need(args, 1, f"/bend/{rest[0]}/{rest[1]} value [ramp_ms]")
            ramp = _number(args[1]) if len(args) > 1 else 0.0
            engine.set_param(rest[0], rest[1], _number(args[0]), ramp_ms=ramp, at=at)
        else:
            raise BendingError("unknown /bend address; see /list addresses")
        return []

    def _interp(self, rest: list[str], args: list[Any], at: int | None) -> list[Reply]:
        if rest or not args or len(args) % 2:
            raise BendingError("/interp takes version weight pairs")
        mix = {str(v): _number(w) for v, w in zip(args[::2], args[1::2], strict=True)}
        self.engine.set_interpolation(mix, at=at)
        return []

    def _version(self, rest: list[str], args: list[Any], at: int | None) -> list[Reply]:
        _need(args, 1, "/version name")
        self.engine.set_version(str(args[0]), at=at)
        return []

    def _preset(self, rest: list[str], args: list[Any], at: int | None) -> list[Reply]:
        _need(args, 1, f"/preset/{'/'.join(rest)} name")
        name = str(args[0])
        path = preset_path(name, self.presets)
        if rest == ["load"]:
            self.engine.load_preset(path, at=at)
        elif rest == ["save"]:
            bank = self.engine.bank
            preset = Preset(
                name=name,
                config=self.engine.bending_config().to_dict(),
                version=bank.version,
                interpolation=bank.mix,
                gain=self.engine.gain,
                mix=self.engine.mix,
                model=self.engine.model.name,
            )
            save_preset(preset, self.presets)
            return [("/preset/saved", [name])]
        else:
            raise BendingError("unknown /preset address: /preset/load or /preset/save")
        return []

    def _engine(self, rest: list[str], args: list[Any], at: int | None) -> list[Reply]:
        engine = self.engine
        setters = {"gain": engine.set_gain, "mix": engine.set_mix}
        if len(rest) == 1 and rest[0] in setters:
            _need(args, 1, f"/engine/{rest[0]} value")
            setters[rest[0]](_number(args[0]), at=at)
        elif rest == ["bypass"]:
            _need(args, 1, "/engine/bypass 0|1")
            engine.set_bypass(_flag(args[0]), at=at)
        elif rest == ["reset"]:
            engine.request_reset(at=at)
        else:
            raise BendingError("unknown /engine address; see /list addresses")
        return []

    def _list(self, rest: list[str], args: list[Any], at: int | None) -> list[Reply]:
        what = str(args[0]) if args else "addresses"
        bended = self.engine.bended
        listings = {
            "weights": lambda: bended.weight_names,
            "activations": lambda: bended.activation_names(self.engine.method),
            "versions": lambda: bended.versions,
            "ops": lambda: sorted(OPS),
            "bends": self._bends,
            "addresses": lambda: [a.pattern for a in ADDRESSES],
        }
        if what not in listings:
            raise BendingError(f"/list takes one of {sorted(listings)}")
        return [(f"/list/{what}", list(listings[what]()))]

    def _bends(self) -> list[str]:
        return [
            f"/bend/{op_id}/{param}" for op_id, op in self.engine.ops.items() for param in op.params
        ]

    def _get(self, rest: list[str], args: list[Any], at: int | None) -> list[Reply]:
        address = "/" + "/".join(rest)
        engine = self.engine
        if len(rest) == 3 and rest[0] == "bend":
            op = engine.op(rest[1])
            value = float(op.enabled) if rest[2] == "enable" else op.get(rest[2])
        elif rest in (["engine", "gain"], ["engine", "mix"], ["engine", "bypass"]):
            value = float(getattr(engine, rest[1]))
        elif rest == ["version"]:
            value = engine.bank.version
        elif rest == ["interp"]:
            mix = engine.bank.mix or {engine.bank.version: 1.0}
            return [("/get/interp", [x for pair in mix.items() for x in pair])]
        else:
            raise BendingError(f"nothing to get at {address}")
        return [(f"/get{address}", [value])]

    def _stats(self, rest: list[str], args: list[Any], at: int | None) -> list[Reply]:
        flat: list[Any] = []
        for key, value in self.engine.stats_dict().items():
            flat += [key, round(value, 3) if isinstance(value, float) else value]
        return [("/stats", flat)]

    def _ping(self, rest: list[str], args: list[Any], at: int | None) -> list[Reply]:
        return [("/pong", [])]


def _need(args: list[Any], count: int, usage: str) -> None:
    if len(args) < count:
        raise BendingError(f"usage: {usage}")


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BendingError(f"expected a number, got {value!r}")
    if not math.isfinite(value):
        raise BendingError(f"expected a finite number, got {value!r}")
    return float(value)


def _flag(value: Any) -> bool:
    return _number(value) != 0.0


def _option(value: Any) -> Any:
    """Constructor arguments from OSC: integral floats become ints (dim, seed), strings stay."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
