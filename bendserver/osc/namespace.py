"""The OSCQuery namespace: the control address table expanded over the live engine.

Each pattern of :data:`bendserver.control.ADDRESSES` becomes the addresses a client can send
now (``/bend/<id>/<param>`` one per parameter of each op of the pending state), described as the
JSON nodes of the OSCQuery proposal: ``TYPE`` and ``RANGE`` from the argument schema (an op
parameter's range from the op itself, names from the ``/list`` an argument's ``choices`` say),
``VALUE`` from what ``/get`` replies, ``ACCESS`` from both. It is built anew for each query, so it
follows ops added and removed and cannot disagree with what the server routes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

from ..control import ADDRESSES, Address, Arg, Controller, route
from ..engine.state import BendingState
from ..errors import BendingError
from ..modulation import KINDS

#: OSC type tags of the argument kinds; an on/off flag is an int (Max and Pd send numbers).
TYPE_TAGS = {"number": "f", "flag": "i", "text": "s"}
#: ACCESS bits of the proposal: the value may be read, the address may be sent to.
READ, WRITE = 1, 2

Node = dict[str, Any]


class Namespace:
    """The OSCQuery view of one controller's address space (read on the control side: the
    engine's pending state and ``/get``, ``/list`` replies; nothing here touches the audio)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def _nodes(self) -> dict[str, Namespace]:
        """Each node's namespace where the engine is a rack of several (a subtree each, under
        ``/<node>``); empty for one model."""
        engine = self.controller.engine
        order = getattr(engine, "order", [])
        if len(order) < 2:
            return {}
        return {name: Namespace(self.controller.node_controller(name)) for name in order}

    def states(self) -> tuple[Any, ...]:
        """The pending and applied states of every node, the rack's output's and the
        modulators': the tree changes when one does."""
        nodes = getattr(self.controller.engine, "nodes", {})
        modulation = getattr(self.controller.engine, "modulation", None)
        mods = () if modulation is None else (modulation.state,)
        rack = self.controller.rack
        output = () if rack is None else (rack.output.pending, rack.output.applied)
        states = (s for node in nodes.values() for s in (node.state, node.applied_state))
        return (*states, *output, *mods)

    def methods(self) -> dict[str, Address]:
        """Every address a client can send now, with the table entry that handles it (a rack
        of several: its own addresses, then each node's under ``/<node>``)."""
        nodes, ctl = self._nodes(), self.controller
        state = None if nodes else ctl.engine.applied_state  # what /get reads
        found: dict[str, Address] = {}
        for entry in ADDRESSES:
            if (nodes and not entry.rack) or (entry.needs and not getattr(ctl, entry.needs)):
                continue
            for path in self._expand(state, entry.parts, []):
                if route(path).entry is entry:  # a more literal entry may take it
                    found.setdefault(path, entry)
        for name, space in nodes.items():
            found |= {f"/{name}{path}": entry for path, entry in space.methods().items()}
        return found

    def tree(self) -> Node:
        """The root node, with every container and method under it."""
        engine = self.controller.engine
        nodes = self._nodes()
        if nodes:
            about = f"bendserver rack: {', '.join(nodes)} ({engine.sample_rate} Hz)"
        else:
            about = f"bendserver: {engine.model.name} ({engine.method}, {engine.sample_rate} Hz)"
        root: Node = {"FULL_PATH": "/", "ACCESS": 0, "DESCRIPTION": about, "CONTENTS": {}}
        for path, entry in self.methods().items():
            node, parts = root, path.strip("/").split("/")
            if parts[0] in nodes:
                continue  # a node's subtree, below
            for depth, part in enumerate(parts):
                full = "/" + "/".join(parts[: depth + 1])
                node = node.setdefault("CONTENTS", {}).setdefault(
                    part, {"FULL_PATH": full, "ACCESS": 0}
                )
            node.update(self._method(path, entry))
        for name, space in nodes.items():
            root["CONTENTS"][name] = _under(f"/{name}", space.tree())
        if nodes:
            return root
        for op in engine.applied_state.ops:
            container = root["CONTENTS"]["bend"]["CONTENTS"].get(op.op_id)
            with contextlib.suppress(BendingError, TypeError):  # added or removed meanwhile
                container["DESCRIPTION"] = f"op {engine.op(op.op_id).name} on {', '.join(op.keys)}"
        return root

    def node(self, path: str) -> Node | None:
        """The node at ``path`` (``/``: the root), or None where there is none."""
        node: Node | None = self.tree()
        for part in (p for p in path.split("/") if p):
            node = node.get("CONTENTS", {}).get(part) if node is not None else None
        return node

    def value(self, path: str) -> list[Any] | None:
        """The pending value at ``path`` as ``/get`` replies it (None: nothing to read)."""
        node, _, rest = path.lstrip("/").partition("/")
        space = self._nodes().get(node)
        if space is not None:
            return space.value("/" + rest)
        try:
            replies = self.controller.dispatch("/get" + path)
        except BendingError:
            return None
        return list(replies[0][1])

    # -- expansion and nodes -----------------------------------------------------------------

    def _expand(
        self, state: BendingState | None, parts: list[str], done: list[str]
    ) -> Iterator[str]:
        if not parts:
            yield "/" + "/".join(done)
            return
        word, rest = parts[0], parts[1:]
        for value in self._fill(state, word, done) if word.startswith("<") else [word]:
            yield from self._expand(state, rest, [*done, value])

    def _fill(self, state: BendingState | None, word: str, done: list[str]) -> list[str]:
        """The names a ``<placeholder>`` takes in ``state`` after the parts ``done`` (a rack
        of several: no state, its nodes' names)."""
        if word == "<node>" and done == ["node"]:
            return list(getattr(self.controller.engine, "order", []))
        frames = self.controller.frames
        if done[:1] == ["in"]:  # the first node's method, where it takes frames
            first = frames.first if frames is not None else None
            if first is None:
                return []
            return [first] if word == "<node>" else [self.controller.engine.nodes[first].method]
        if done[:1] == ["mod"]:  # the rack's modulators, then a modulator's parameters
            return _modulator_words(self.controller, word, done)
        if state is None:
            return []
        if word == "<id>":
            return state.op_ids
        if word == "<param>":
            return [name for name, _ in state.op(done[-1]).params]
        if word == "<name>":
            return list(self.controller.engine.model.attributes)
        return []  # <address> of /get, /scheduled: the VALUE of each node answers /get

    def _method(self, path: str, entry: Address) -> Node:
        if entry.pattern == "/attr/<name>":
            return self._attribute(path, entry)
        schema = entry.schema
        args = list(schema.required) + list(schema.repeated) * schema.min_repeats
        if entry.pattern == "/in/<node>/<method>":  # a value per channel of the frame
            args = list(schema.required) * self.controller.frames.held.channels
        value = self.value(path)
        node: Node = {"FULL_PATH": path, "DESCRIPTION": entry.effect}
        if args:
            tags = "".join(_tag(arg, value[i] if value else None) for i, arg in enumerate(args))
            ranges = [self._range(path, arg, index) for index, arg in enumerate(args)]
            node["TYPE"] = tags
            if any(ranges):
                node["RANGE"] = ranges
            if value is not None and len(value) == len(tags):
                value = [_typed(tag, v) for tag, v in zip(tags, value, strict=True)]
        param = _op_param(self.controller, path)
        if param is not None and param.doc:
            node["DESCRIPTION"] = f"{param.doc} ({entry.effect})"
        node["ACCESS"] = (READ if value is not None else 0) | (WRITE if args else 0)
        if value is not None:
            node["VALUE"] = value
        return node

    def _attribute(self, path: str, entry: Address) -> Node:
        """An nn~ attribute's node, typed from its setter (:mod:`bendserver.attributes`): a
        bool an int of 0..1, a string with its choices, a tensor or buffer a sound file's
        path; readable where it has a getter, writable where it has a setter."""
        spec = self.controller.engine.attribute_spec(path.rsplit("/", 1)[-1])
        value = self.value(path) if spec.readable else None
        node: Node = {"FULL_PATH": path, "DESCRIPTION": f"nn~ attribute {spec.describe()}"}
        if spec.settable:
            node["TYPE"] = "".join(_ATTRIBUTE_TAGS[kind] for kind in spec.kinds)
            node["RANGE"] = [_attribute_range(kind, spec.choices) for kind in spec.kinds]
            if value is not None and len(value) == len(spec.kinds):
                value = [_typed(tag, v) for tag, v in zip(node["TYPE"], value, strict=True)]
        node["ACCESS"] = (READ if value is not None else 0) | (WRITE if spec.settable else 0)
        if value is not None:
            node["VALUE"] = value
        return node

    def _range(self, path: str, arg: Arg, index: int) -> Node | None:
        """The RANGE of one argument: MIN and MAX where bounded, VALS where named by a list."""
        if arg.choices:
            return {"VALS": self.controller.dispatch("/list", [arg.choices])[0][1]}
        low, high = (0, 1) if arg.kind == "flag" else (arg.low, arg.high)
        param = _op_param(self.controller, path) if index == 0 else None
        if param is not None:
            low, high = param.low, param.high
        bounds = {"MIN": low, "MAX": high}
        return {key: bound for key, bound in bounds.items() if math.isfinite(bound)} or None


#: OSC type tags of nn~ attribute kinds (a tensor or buffer: a sound file's path).
_ATTRIBUTE_TAGS = {"bool": "i", "int": "i", "float": "f", "str": "s", "tensor": "s", "buffer": "s"}


def _attribute_range(kind: str, choices: tuple[str, ...]) -> Node | None:
    """The RANGE of one value of an attribute: 0..1 for a bool, the choices of a string."""
    if kind == "bool":
        return {"MIN": 0, "MAX": 1}
    if kind == "str" and choices:
        return {"VALS": list(choices)}
    return None


def _modulator_words(controller: Controller, word: str, done: list[str]) -> list[str]:
    """The rack's modulators' ids (``<mod>``), and the parameters of one (``<name>``)."""
    modulation = getattr(controller.engine, "modulation", None)
    mods = {} if modulation is None else {m.mod_id: m for m in modulation.state}
    if word == "<mod>":
        return list(mods)
    if word == "<name>" and len(done) == 2 and done[1] in mods:
        return list(KINDS[mods[done[1]].kind].knobs)
    return []


def _op_param(controller: Controller, path: str) -> Any:
    """The op parameter (its ``Param``: range, doc) that ``path`` sets, or a modulator's
    (its ``Knob``), or None."""
    names = route(path).path
    if "mod" in names and "name" in names:
        modulation = getattr(controller.engine, "modulation", None)
        kinds = {m.mod_id: KINDS[m.kind] for m in modulation.state} if modulation else {}
        kind = kinds.get(names["mod"])
        return None if kind is None else kind.knobs.get(names["name"])
    if "id" not in names or "param" not in names:
        return None
    try:
        return controller.engine.op(names["id"]).param(names["param"])
    except BendingError:  # removed since the state was read
        return None


def _under(prefix: str, node: Node) -> Node:
    """A node's subtree moved under ``prefix`` (its FULL_PATHs start with it)."""
    path = node["FULL_PATH"]
    moved = {**node, "FULL_PATH": prefix if path == "/" else prefix + path}
    if "CONTENTS" in node:
        moved["CONTENTS"] = {k: _under(prefix, v) for k, v in node["CONTENTS"].items()}
    return moved


def _tag(arg: Arg, value: Any) -> str:
    """The OSC type tag of an argument (a ``value`` argument: the type of its value)."""
    if arg.kind != "value":
        return TYPE_TAGS[arg.kind]
    if isinstance(value, str):
        return "s"
    return "i" if isinstance(value, (bool, int)) else "f"


def _typed(tag: str, value: Any) -> Any:
    """A value as its type tag says (``/get`` replies an on/off as 1.0)."""
    if tag == "i" and isinstance(value, (bool, int, float)):
        return int(value)
    if tag == "f" and isinstance(value, (bool, int, float)):
        return float(value)
    return value
