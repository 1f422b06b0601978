"""TorchScript methods as fx graphs: a ``.ts`` file's IR run on concrete values, emitting fx nodes.

The method's IR is walked node by node with real tensors, as the tracer runs a Python model:
every tensor operation becomes an fx node on the file's own parameters and buffers (``get_attr``
by module path, so ``decoder.net.2.weight`` keeps its name and bends in place), every scalar,
shape, list or tuple is computed once for the fixed block shape, ``prim::If`` and ``prim::Loop``
take the branch and count the concrete values give, and a decision read from a tensor's values is
guarded as in traced Python models. Submodule calls are walked into, keeping their paths: a
submodule's ``forward`` output is named after it (``decoder.net.2`` gives ``decoder_net_2``).
In-place writes into buffers (``aten::copy_`` into a streaming cache) stay in-place writes. The
scalar attributes a method reads are frozen into the graph (``graph.attribute_reads``): setting
one (``set_<a>``) converts again, with the values its setter writes (:func:`setter_writes`).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from .. import compat
from ..errors import BendingError
from .flow import (
    FlowStep,
    LogicalFlowStep,
    ValueFlowStep,
    guard_bool,
    guard_equal,
    latent,
    names_latent,
)
from .tracer import restoring_buffers


class ConversionError(BendingError):
    """A method of a TorchScript file that cannot become a graph (the engine then plays it as a
    direct scripted call)."""


@dataclass
class _Tensor:
    """A tensor the graph computes: its fx node and its concrete value."""

    node: torch.fx.Node
    value: torch.Tensor


@dataclass
class _Module:
    """A scripted submodule and its path from the root (``""`` for the root)."""

    module: torch.jit.ScriptModule
    path: str

    def child(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name


#: Operators whose scalar result says something about a tensor's metadata, not its values
#: (fixed with the block shape): computed once, not guarded.
_METADATA = {
    "size", "sym_size", "dim", "numel", "len", "stride", "is_floating_point", "is_complex",
    "element_size", "is_contiguous", "__is__", "__isnot__", "device", "dtype", "layout",
    "is_cuda", "requires_grad", "get_device",
}  # fmt: skip

#: Python's own operations on scalars, lists, tuples, strings and dicts (what TorchScript's
#: scalar operators compute), by operator name.
_PYTHON: dict[str, Callable[..., Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "floordiv": operator.floordiv,
    "remainder": operator.mod,
    "pow": operator.pow,
    "neg": operator.neg,
    "abs": abs,
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "__not__": operator.not_,
    "__and__": operator.and_,
    "__or__": operator.or_,
    "__xor__": operator.xor,
    "__is__": operator.is_,
    "__isnot__": operator.is_not,
    "__contains__": operator.contains,
    "__getitem__": operator.getitem,
    "_set_item": lambda c, k, v: c.__setitem__(k, v),
    "Int": int,
    "Float": float,
    "Bool": bool,
    "IntImplicit": int,
    "FloatImplicit": float,
    "ScalarImplicit": lambda x: x,
    "str": str,
    "ceil": math.ceil,
    "floor": math.floor,
    "sqrt": math.sqrt,
    "log": math.log,
    "exp": math.exp,
    "round": lambda x: float(round(x)),
    "min": min,
    "max": max,
    "len": len,
    "list": list,
    "append": lambda items, x: items.append(x) or items,
    "extend": lambda items, more: items.extend(more),
    "insert": lambda items, i, x: items.insert(i, x),
    "pop": lambda items, i=-1: items.pop(i),
    "slice": lambda items, start=None, end=None, step=1: items[start:end:step],
    "format": lambda text, *args: text.replace("{}", "%s") % args,
    "keys": lambda d: list(d.keys()),
    "values": lambda d: list(d.values()),
    "get": lambda d, k, default=None: d.get(k, default),
    "warn": lambda *args: None,
}

_CONTAINERS = (list, tuple, dict, str)


def setter_writes(
    module: torch.jit.ScriptModule,
    name: str,
    arguments: Iterable[Any],
    attributes: Mapping[str, Any] = (),
) -> tuple[dict[str, Any], Any]:
    """The attributes ``module.set_<name>(*arguments)`` would write (``path.attr`` -> value)
    and what it returns (nn~'s setters: 0 taken, -1 refused), found by running the setter's IR
    without touching the module (``attributes``: the values earlier setters wrote). A setter
    reading what the converter cannot (a TorchScript class object) raises ConversionError."""
    converter = ScriptConverter(module, attributes)
    with torch.no_grad(), restoring_buffers(module):
        outputs = converter.run_method(_Module(module, ""), f"set_{name}", list(arguments))
    writes = {path: _concrete(value) for path, value in converter.writes.items()}
    return writes, _concrete(outputs[0]) if outputs else None


def assigned_attributes(module: torch.jit.ScriptModule, method: str) -> set[str]:
    """The attributes of ``module`` itself that ``method`` assigns (``self.x = ...``)."""
    graph = compat.script_method_graph(module, method)
    owner = next(iter(graph.inputs())).unique()
    assigned, blocks = set(), [graph]
    while blocks:
        for node in blocks.pop().nodes():
            if node.kind() == "prim::SetAttr" and node.inputsAt(0).unique() == owner:
                assigned.add(compat.ir_name(node))
            blocks.extend(node.blocks())
    return assigned


class ScriptConverter:
    """Converts methods of one scripted module into fx graphs. ``attributes`` overrides the
    scalar attributes the module holds (``path.attr`` -> value: set but not yet applied)."""

    def __init__(self, root: torch.jit.ScriptModule, attributes: Mapping[str, Any] = ()) -> None:
        self.root = root
        self.attributes = dict(attributes)
        self.graph = torch.fx.Graph()
        self.flow_steps: list[FlowStep] = []
        #: scalar attributes read (frozen into the graph) and written, ``path.attr`` -> value
        self.reads: dict[str, Any] = {}
        self.writes: dict[str, Any] = {}
        self.constants: dict[str, torch.Tensor] = {}
        self._attrs: dict[str, _Tensor] = {}
        self._named: set[torch.fx.Node] = set()
        self._forward_of_root = False

    def convert(self, method: str, inputs: Mapping[str, Any]) -> torch.fx.Graph:
        """The graph of ``root.<method>`` for ``inputs`` (argument name -> example value), with
        ``flow_steps``, ``attribute_reads`` and ``constants``. Buffers are left as found."""
        if method not in compat.script_methods(self.root):
            raise ConversionError(f"the file has no method '{method}'")
        schema = getattr(self.root, method).schema
        arguments = []
        for argument in schema.arguments[1:]:
            if argument.name in inputs:
                value = inputs[argument.name]
            elif argument.has_default_value():
                value = argument.default_value
            else:
                raise ConversionError(f"{method}() needs a value for '{argument.name}'")
            if isinstance(value, torch.Tensor):
                node = self.graph.placeholder(argument.name, type_expr=torch.Tensor)
                value = self._record(_Tensor(node, value))
            arguments.append(value)
        self._forward_of_root = names_latent(self.root, method)
        with torch.no_grad(), restoring_buffers(self.root):
            outputs = self.run_method(_Module(self.root, ""), method, arguments)
        result = outputs[0] if len(outputs) == 1 else tuple(outputs)
        self.graph.output(self._fx(result))
        #: the example's output, computed while converting
        self.output = _concrete(result)
        self.graph.eliminate_dead_code()
        self.graph.lint()
        self.graph.flow_steps = self.flow_steps
        self.graph.attribute_reads = dict(self.reads)
        self.graph.constants = dict(self.constants)
        return self.graph

    # -- walking the IR ----------------------------------------------------------------------

    def run_method(self, owner: _Module, method: str, arguments: list[Any]) -> list[Any]:
        graph = compat.script_method_graph(owner.module, method)
        return self._run(graph, [owner, *arguments], {})

    def _run(self, block: Any, arguments: Iterable[Any], env: dict[int, Any]) -> list[Any]:
        """Run a graph or a block: bind its inputs, run its nodes, give its outputs."""
        for value, argument in zip(block.inputs(), arguments, strict=True):
            env[value.unique()] = argument
        for node in block.nodes():
            results = self._node(node, [env[v.unique()] for v in node.inputs()], env)
            for value, result in zip(node.outputs(), results, strict=True):
                env[value.unique()] = result
        return [env[v.unique()] for v in block.outputs()]

    def _node(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        kind = node.kind()
        namespace, name = kind.split("::", 1)
        if namespace == "prim":
            handler = getattr(self, f"_prim_{name}", None)
            if handler is None:
                raise ConversionError(f"{kind} is not supported ({_where(node)})")
            return handler(node, args, env)
        if namespace != "aten":
            raise ConversionError(f"{kind} is not supported ({_where(node)})")
        return self._aten(node, name, args)

    def _prim_Constant(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        if node.output().type().kind() == "FunctionType":
            return [None]
        return [compat.ir_constant(node)]

    def _prim_GetAttr(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return [self._attribute(args[0], compat.ir_name(node))]

    def _attribute(self, owner: _Module, name: str) -> Any:
        path = owner.child(name)
        if path in self._attrs:
            return self._attrs[path]
        overridden = path in self.attributes
        try:
            value = self.attributes[path] if overridden else getattr(owner.module, name)
        except RuntimeError as error:  # a TorchScript class (an nn~ buffer) Python cannot hold
            named = re.search(r"__torch__\.[\w.]+\w", str(error))
            raise ConversionError(
                f"{path} holds an object of the file's own TorchScript class "
                f"({named.group(0) if named else 'unnamed'}), which Python cannot read"
            ) from None
        if isinstance(value, torch.jit.ScriptModule):
            return _Module(value, path)
        if isinstance(value, torch.Tensor):
            self._attrs[path] = self._record(_Tensor(self.graph.get_attr(path), value))
            return self._attrs[path]
        self.reads.setdefault(path, value)
        return value

    def _prim_SetAttr(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        owner, value = args
        name = compat.ir_name(node)
        path = owner.child(name)
        if isinstance(value, _Tensor):
            current = self._attribute(owner, name)
            if not isinstance(current, _Tensor) or current.value.shape != value.value.shape:
                raise ConversionError(
                    f"{path} is given a tensor of another shape ({_where(node)}): "
                    "only caches written in place convert"
                )
            copied = self.graph.call_function(
                torch.ops.aten.copy_.default, (current.node, value.node)
            )
            current.value.copy_(value.value)
            self._record(_Tensor(copied, current.value))
            return []
        self.attributes[path] = self.writes[path] = value
        return []

    def _prim_CallMethod(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        owner, method = args[0], compat.ir_name(node)
        outputs = self.run_method(owner, method, args[1:])
        if self._forward_of_root and owner.path == "" and method == "encode":
            outputs = [self._latent(outputs[0])]
        if owner.path:
            layer = owner.path.replace(".", "_") + ("" if method == "forward" else f"_{method}")
            self._name_output(outputs, layer, args)
        return outputs

    def _prim_CallFunction(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return self._run(compat.script_function_graph(node), args[1:], {})

    def _prim_If(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        taken = self._concrete(args[0], bool, LogicalFlowStep, node)
        blocks = list(node.blocks())
        return self._run(blocks[0 if taken else 1], [], env)

    def _prim_Loop(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        trips = self._concrete(args[0], int, ValueFlowStep, node)
        going = self._concrete(args[1], bool, LogicalFlowStep, node)
        carried = args[2:]
        body = next(node.blocks())
        step = 0
        while step < trips and going:
            going, *carried = self._run(body, [step, *carried], env)
            going = self._concrete(going, bool, LogicalFlowStep, node)
            step += 1
        return carried

    def _prim_RaiseException(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        raise ConversionError(f"the method raises for this input: {args[0]} ({_where(node)})")

    def _prim_ListConstruct(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return [list(args)]

    def _prim_ListUnpack(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return list(args[0])

    def _prim_TupleConstruct(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return [tuple(args)]

    _prim_TupleUnpack = _prim_ListUnpack

    def _prim_TupleIndex(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return [args[0][args[1]]]

    def _prim_DictConstruct(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return [dict(zip(args[::2], args[1::2], strict=True))]

    def _prim_unchecked_cast(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return [args[0]]

    _prim_data = _prim_unchecked_cast

    def _prim_Uninitialized(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return [None]

    def _prim_device(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return [args[0].value.device]

    def _prim_dtype(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return [compat.dtype_number(args[0].value.dtype)]

    def _prim_is_cuda(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return [args[0].value.is_cuda]

    def _prim_min(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return [min(*args) if len(args) > 1 else min(args[0])]

    def _prim_max(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return [max(*args) if len(args) > 1 else max(args[0])]

    def _prim_NumToTensor(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return self._emit(node, torch.ops.aten.scalar_tensor.default, [args[0]], {})

    def _prim_Print(self, node: Any, args: list[Any], env: dict[int, Any]) -> list[Any]:
        return []

    # -- operators ---------------------------------------------------------------------------

    def _aten(self, node: Any, name: str, args: list[Any]) -> list[Any]:
        tensors = _has_tensor(args)
        on_list = bool(args) and isinstance(args[0], _CONTAINERS) and name in _LIST_OPS
        if name in _PYTHON and (not tensors or on_list or name in ("__is__", "__isnot__")):
            return [_PYTHON[name](*args)]
        schema = compat.ir_schema(node)
        if schema is None:
            raise ConversionError(f"aten::{name} has no schema ({_where(node)})")
        target = getattr(getattr(torch.ops.aten, name), schema.overload_name or "default")
        positional, keywords, defaults = [], {}, []
        for argument, value in zip(schema.arguments, args, strict=True):
            value = compat.ir_enum(str(argument.real_type), value)
            if argument.kwarg_only:
                keywords[argument.name] = value
            else:
                positional.append(value)
                defaults.append(_is_default(argument, value))
        while defaults and defaults.pop():  # left to the operator: a public function of its
            positional.pop()  # name may take them by keyword only (``Tensor.to``'s format)
        returns_tensor = any("Tensor" in str(r.type) for r in schema.returns)
        if not returns_tensor and (not tensors or name in _METADATA):
            return _outputs(target(*_concrete(positional), **_concrete(keywords)), node)
        outputs = self._emit(node, target, positional, keywords)
        if not returns_tensor:  # a scalar read from a tensor's values: frozen and guarded
            read = self.graph.find_nodes(op="call_function", target=target)[-1]
            step = ValueFlowStep(name=read.name, value=outputs[0], file=_where(node))
            self.flow_steps.append(step)
            self.graph.call_function(guard_equal, (read, outputs[0], step.describe()))
        return outputs

    def _emit(
        self, node: Any, target: Any, positional: list[Any], keywords: dict[str, Any]
    ) -> list[Any]:
        """Run ``target`` on the concrete values and add its fx node; one result per output."""
        try:
            value = target(*_concrete(positional), **_concrete(keywords))
        except Exception as error:
            raise ConversionError(
                f"{node.kind()} failed on the example input ({_where(node)}): "
                f"{type(error).__name__}: {error}"
            ) from error
        name = node.kind().split("::")[1].strip("_") or "op"
        fx_node = self.graph.create_node(
            "call_function", target, tuple(self._fx(positional)), self._fx(keywords), name=name
        )
        outputs = list(node.outputs())
        if len(outputs) == 1:
            return [self._wrap(fx_node, value)]
        return [
            self._wrap(self.graph.call_function(operator.getitem, (fx_node, i)), item)
            for i, item in enumerate(value)
        ]

    def _wrap(self, node: torch.fx.Node, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self._record(_Tensor(node, value))
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
            items = [
                self._wrap(self.graph.call_function(operator.getitem, (node, i)), item)
                for i, item in enumerate(value)
            ]
            return items if isinstance(value, list) else tuple(items)
        return value

    def _concrete(self, value: Any, kind: type, step_kind: type[FlowStep], node: Any) -> Any:
        """A loop count or a branch as a Python value (guarded when read from a tensor)."""
        if not isinstance(value, _Tensor):
            return kind(value)
        concrete = kind(value.value)
        step = step_kind(name=value.node.name, value=concrete, file=_where(node))
        self.flow_steps.append(step)
        guard = guard_bool if kind is bool else guard_equal
        self.graph.call_function(guard, (value.node, concrete, step.describe()))
        return concrete

    # -- values ------------------------------------------------------------------------------

    def _record(self, tensor: _Tensor) -> _Tensor:
        tensor.node.meta["shape"] = tensor.value.shape
        tensor.node.meta["dtype"] = tensor.value.dtype
        tensor.node.type = torch.Tensor
        return tensor

    def _latent(self, value: Any) -> Any:
        """The root's ``encode`` output in its ``forward``, through a node named ``latent``."""
        if not isinstance(value, _Tensor):
            return value
        node = self.graph.call_function(latent, (value.node,), name="latent")
        return self._record(_Tensor(node, value.value))

    def _name_output(self, outputs: list[Any], layer: str, inputs: list[Any]) -> None:
        """Name a submodule call's single tensor output after the submodule (the innermost
        call keeps its name: a container returning its last layer's output)."""
        if len(outputs) != 1 or not isinstance(outputs[0], _Tensor):
            return
        node = outputs[0].node
        if node.op != "call_function" or node in self._named:
            return
        if any(isinstance(a, _Tensor) and a.node is node for a in inputs):
            return
        compat.rename_fx_node(node, layer)
        self._named.add(node)

    def _fx(self, value: Any) -> Any:
        """``value`` as an fx argument: graph tensors as their nodes, other tensors as
        constants of the graph."""
        if isinstance(value, _Tensor):
            return value.node
        if isinstance(value, torch.Tensor):
            name = f"_constant_{len(self.constants)}"
            self.constants[name] = value
            return self.graph.get_attr(name)
        if isinstance(value, (list, tuple)):
            return type(value)(self._fx(v) for v in value)
        if isinstance(value, dict):
            return {k: self._fx(v) for k, v in value.items()}
        if isinstance(value, _Module):
            raise ConversionError(f"a submodule ({value.path}) is passed as a value")
        return value


#: Operators that act on a list that may hold tensors (Python's, not the tensor's).
_LIST_OPS = {
    "__getitem__", "_set_item", "len", "list", "append", "extend", "insert", "pop", "slice",
    "add", "mul", "__contains__", "eq", "ne", "keys", "values", "get",
}  # fmt: skip


def _is_default(argument: Any, value: Any) -> bool:
    """Whether ``value`` is the schema argument's default (None, or a number, flag or string
    of the default's own type and value)."""
    if not argument.has_default_value():
        return False
    default = argument.default_value
    if value is None or default is None:
        return value is None and default is None
    return (
        type(value) is type(default)
        and isinstance(value, (bool, int, float, str))
        and (value == default)
    )


def _has_tensor(value: Any) -> bool:
    if isinstance(value, (_Tensor, torch.Tensor)):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_has_tensor(v) for v in value.values())
    return False


def _concrete(value: Any) -> Any:
    if isinstance(value, _Tensor):
        return value.value
    if isinstance(value, (list, tuple)):
        return type(value)(_concrete(v) for v in value)
    if isinstance(value, dict):
        return {k: _concrete(v) for k, v in value.items()}
    return value


def _outputs(result: Any, node: Any) -> list[Any]:
    return [result] if len(list(node.outputs())) == 1 else list(result)


def _where(node: Any) -> str:
    """Where an IR node comes from in the model's source, in one line."""
    lines = [line.strip() for line in str(node.sourceRange()).splitlines() if line.strip()]
    return lines[0] if lines else node.kind()
