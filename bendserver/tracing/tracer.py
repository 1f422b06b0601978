"""An fx tracer that runs concrete values beside the proxies.

``torch.fx.symbolic_trace`` only sees proxies, so it rejects ``len(x)``, ``if x.shape[1] > 1``,
``for i in range(x.shape[0])``, tensor constructors sized by a shape and in-place writes into
slices. :class:`BendingTracer` executes every recorded operation on real tensors as it records it,
so each proxy knows its value: control flow is decided on the real value, the decision is frozen
into the graph as a guard (see :mod:`.flow`), and every node records its shape and dtype.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import operator
import os
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.fx
from torch.fx.graph import inplace_methods
from torch.fx.node import map_aggregate
from torch.fx.proxy import Attribute

from .. import compat
from ..errors import BendingError
from ..slices import breathe
from .flow import (
    FlowStep,
    LogicalFlowStep,
    LoopFlowStep,
    ValueFlowStep,
    guard_bool,
    guard_equal,
    guard_len,
    latent,
    names_latent,
)

# Tensor constructors whose size arguments may be traced values (``torch.zeros(x.shape[0], 4)``).
_CONSTRUCTORS = (
    "zeros",
    "ones",
    "empty",
    "full",
    "rand",
    "randn",
    "randint",
    "arange",
    "linspace",
    "eye",
    "tensor",
)
# Node types shown in printed graphs (``%getitem : int``); others are left unannotated.
_ANNOTATED_TYPES = (int, float, bool, torch.Tensor, torch.Size)
_TORCH_DIR = os.path.dirname(torch.__file__)
_TRACING_DIR = os.path.dirname(__file__)


class ConcreteProxy(torch.fx.Proxy):
    """A proxy that also holds the concrete value computed by the traced code (``.value``)."""

    value: Any

    def __getattr__(self, name: str) -> ConcreteAttribute:
        return ConcreteAttribute(self, name)

    def __iter__(self) -> Iterator[ConcreteProxy]:
        return self.tracer.iter(self)

    def __len__(self) -> int:
        return self.tracer.concrete_len(self)

    def __index__(self) -> int:
        return self.tracer.concrete_number(self, int, LoopFlowStep)

    def __int__(self) -> int:
        return self.tracer.concrete_number(self, int, ValueFlowStep)

    def __float__(self) -> float:
        return self.tracer.concrete_number(self, float, ValueFlowStep)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.tracer.create_proxy("call_function", operator.setitem, (self, key, value), {})


def _inplace(name: str):
    target = getattr(operator, name)

    def method(self: ConcreteProxy, other: Any) -> ConcreteProxy:
        return self.tracer.create_proxy("call_function", target, (self, other), {})

    return method


# ``x += y`` must stay in place: it may write into a view of a streaming buffer.
for _name in inplace_methods:
    if _name != "setitem":
        setattr(ConcreteProxy, f"__{_name}__", _inplace(_name))


class ConcreteAttribute(ConcreteProxy, Attribute):
    """``proxy.attr``: becomes a node only when used, as in fx, and knows its value meanwhile."""

    @property
    def value(self) -> Any:
        return getattr(self.root.value, self.attr)


def _user_location() -> str:
    """``file:line`` of the innermost frame in user code (outside torch and this package)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        inside = filename.startswith((_TORCH_DIR, _TRACING_DIR)) or filename.startswith("<frozen")
        if not inside and not filename.endswith("contextlib.py"):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


@contextlib.contextmanager
def recording_new_buffers() -> Iterator[list[tuple[torch.nn.Module, str, torch.Tensor]]]:
    """Buffers registered while the block runs, with their values when registered: the state a
    streaming model makes on its first call (cached_conv's padding caches)."""
    created: list[tuple[torch.nn.Module, str, torch.Tensor]] = []
    register = torch.nn.Module.register_buffer

    def recording(module: torch.nn.Module, name: str, tensor: Any, persistent: bool = True):
        register(module, name, tensor, persistent)
        if isinstance(tensor, torch.Tensor):
            created.append((module, name, tensor.detach().clone()))

    torch.nn.Module.register_buffer = recording
    try:
        yield created
    finally:
        torch.nn.Module.register_buffer = register


def initialized(root: torch.nn.Module, method: str, inputs: dict[str, Any]) -> None:
    """Call ``root.<method>`` once on ``inputs``, eagerly, so that state a model makes on its
    first call exists as real buffers before tracing (traced, it would become a fresh tensor in
    every call, and the stream would lose its past); then put every buffer back as it was, the
    new ones as they were registered."""
    with torch.no_grad(), restoring_buffers(root), recording_new_buffers() as created:
        getattr(root, method)(**inputs)
    with torch.no_grad():
        for module, name, value in created:
            buffer = getattr(module, name, None)
            if isinstance(buffer, torch.Tensor) and buffer.shape == value.shape:
                buffer.copy_(value)


@contextlib.contextmanager
def restoring_buffers(module: torch.nn.Module) -> Iterator[None]:
    """Run a block, then put back the module's buffers as they were (streaming caches, stats)."""
    saved = [(buf, buf.detach().clone()) for buf in module.buffers()]
    try:
        yield
    finally:
        with torch.inference_mode():  # a buffer a played block made is an inference tensor
            for buf, value in saved:
                buf.copy_(value)


def _has_proxy(args: Any, kwargs: Any) -> bool:
    leaves = compat.tree_leaves((args, kwargs))
    return any(isinstance(leaf, torch.fx.Proxy) for leaf in leaves)


class BendingTracer(torch.fx.Tracer):
    """Traces one method of a module on concrete inputs.

    Standard ``torch.nn`` modules are leaves (one ``call_module`` node each, named after their
    path: ``conv_modules.0`` gives ``conv_modules_0``); ``leaf_modules`` adds classes to keep
    whole, ``traced_modules`` names ``torch.nn`` classes to trace into.
    """

    def __init__(
        self,
        leaf_modules: Sequence[type[torch.nn.Module]] = (),
        traced_modules: Sequence[type[torch.nn.Module]] = (),
    ) -> None:
        super().__init__(autowrap_modules=(math,))
        self.proxy_buffer_attributes = True
        self.leaf_modules = tuple(leaf_modules)
        self.traced_modules = tuple(traced_modules)
        self.flow_steps: list[FlowStep] = []
        self._inputs: dict[str, Any] = {}
        self._values: dict[torch.fx.Node, Any] = {}
        self._output: Any = None

    # -- entry point -------------------------------------------------------------------------

    def trace_method(
        self, root: torch.nn.Module, method: str, inputs: dict[str, Any]
    ) -> tuple[torch.fx.Graph, Any]:
        """Trace ``root.<method>`` on ``inputs`` (argument name -> value).

        Returns the graph (with ``graph.flow_steps``) and the concrete output. Buffers that the
        concrete run updated in place are restored, so the module is left as it was found.
        """
        if not callable(getattr(type(root), method, None)):
            raise BendingError(f"{type(root).__name__} has no method '{method}' to trace")
        self.traced_func_name = method
        self.flow_steps = []
        self._inputs = dict(inputs)
        self._values = {}
        try:
            initialized(root, method, self._inputs)
            with torch.no_grad(), restoring_buffers(root), self._traceable_constructors():
                with self._latent_named(root, method):
                    graph = self.trace(root)
        finally:
            self._values = {}
        unused = set(self._inputs) - {n.target for n in graph.nodes if n.op == "placeholder"}
        if unused:
            raise BendingError(
                f"{method}() has no argument named {sorted(unused)}; "
                f"its arguments are {self._argument_names(root, method)}"
            )
        graph.flow_steps = self.flow_steps
        output, self._output = self._output, None
        return graph, output

    @contextlib.contextmanager
    def _latent_named(self, root: torch.nn.Module, method: str) -> Iterator[None]:
        """Meanwhile, ``root.encode``'s output in ``forward`` is a node named ``latent``."""
        if not names_latent(root, method):
            yield
            return
        encode = root.encode

        def named(*args: Any, **kwargs: Any) -> Any:
            out = encode(*args, **kwargs)
            if isinstance(out, ConcreteProxy):
                return self.create_proxy("call_function", latent, (out,), {}, name="latent")
            return out

        root.encode = named
        try:
            yield
        finally:
            del root.encode

    @staticmethod
    def _argument_names(root: torch.nn.Module, method: str) -> list[str]:
        return list(inspect.signature(getattr(root, method)).parameters)

    # -- fx hooks ----------------------------------------------------------------------------

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        if isinstance(m, self.leaf_modules):
            return True
        if isinstance(m, self.traced_modules):
            return False
        return super().is_leaf_module(m, module_qualified_name)

    def proxy(self, node: torch.fx.Node) -> ConcreteProxy:
        return ConcreteProxy(node, self)

    def create_proxy(
        self,
        kind: str,
        target: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        name: str | None = None,
        type_expr: Any | None = None,
        proxy_factory_fn: Any = None,
    ) -> Any:
        if kind == "placeholder":
            return self._placeholder(target, args, type_expr)
        breathe()  # a trace on a live server's control worker leaves the audio its turns
        value = self._run(kind, target, args, kwargs)
        proxy = super().create_proxy(kind, target, args, kwargs, name, type_expr)
        self._record(proxy, value)
        return proxy

    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
        node = super().create_node(kind, target, args, kwargs, name, type_expr)
        if kind == "output":
            self._output = torch.fx.node.map_arg(node.args[0], self._values.__getitem__)
        return node

    def to_bool(self, obj: ConcreteProxy) -> bool:
        value = bool(obj.value)
        step = self._step(LogicalFlowStep, obj.node.name, value)
        self.create_node("call_function", guard_bool, (obj.node, value, step.describe()), {})
        return value

    def iter(self, obj: ConcreteProxy) -> Iterator[ConcreteProxy]:
        length = len(obj.value)
        if isinstance(obj.value, (torch.Tensor, torch.Size)):
            self._guard_len(obj, length)
        return iter([obj[i] for i in range(length)])

    # -- concrete values ---------------------------------------------------------------------

    def concrete_len(self, obj: ConcreteProxy) -> int:
        """``len(proxy)``: the real length, guarded."""
        length = len(obj.value)
        self._guard_len(obj, length)
        return length

    def concrete_number(self, obj: ConcreteProxy, kind: type, step_kind: type[FlowStep]) -> Any:
        """``int(proxy)``, ``float(proxy)``, ``range(proxy)``: the real number, guarded."""
        converted = self.create_proxy("call_function", kind, (obj,), {})
        value = converted.value
        step = self._step(step_kind, converted.node.name, value)
        self.create_node("call_function", guard_equal, (converted.node, value, step.describe()), {})
        return value

    def _guard_len(self, obj: ConcreteProxy, length: int) -> None:
        step = self._step(LoopFlowStep, obj.node.name, length)
        self.create_node("call_function", guard_len, (obj.node, length, step.describe()), {})

    def _step(self, kind: type[FlowStep], name: str, value: Any) -> FlowStep:
        step = kind(name=name, value=value, file=_user_location())
        self.flow_steps.append(step)
        return step

    def _placeholder(self, name: str, default: tuple[Any, ...], type_expr: Any) -> Any:
        if name in self._inputs:
            value = self._inputs[name]
        elif default:
            value = default[0]
        else:
            raise BendingError(
                f"trace() needs a value for argument '{name}' of {self.traced_func_name}(): "
                f"pass it as a keyword, e.g. trace({name}=torch.randn(1, 1, 2048))"
            )
        if isinstance(value, torch.Tensor) and type_expr is None:
            type_expr = torch.Tensor
        proxy = super().create_proxy("placeholder", name, default, {}, type_expr=type_expr)
        if isinstance(value, torch.Tensor):
            self._record(proxy, value)
            return proxy
        # Non-tensor arguments are specialised: the traced code sees the plain value, and a guard
        # checks that later calls pass the same one.
        code = getattr(type(self.root), self.traced_func_name).__code__
        step = ValueFlowStep(
            name=name, value=value, file=f"{code.co_filename}:{code.co_firstlineno}"
        )
        self.flow_steps.append(step)
        self.create_node("call_function", guard_equal, (proxy.node, value, step.describe()), {})
        return value

    def _run(self, kind: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Execute one recorded operation on the concrete values of its arguments."""
        concrete = functools.partial(map_aggregate, fn=_concrete_value)
        cargs, ckwargs = concrete(args), concrete(kwargs)
        try:
            patched = _reaches_patches(kind, target, cargs)
            with compat.fx_patches_reverted() if patched else _AS_IS:
                if kind == "call_function":
                    return target(*cargs, **ckwargs)
                if kind == "call_method":
                    return getattr(cargs[0], target)(*cargs[1:], **ckwargs)
                if kind == "call_module":
                    return self.root.get_submodule(target)(*cargs, **ckwargs)
                if kind == "get_attr":
                    return operator.attrgetter(target)(self.root)
        except BendingError:
            raise
        except Exception as error:
            raise BendingError(
                f"tracing {self.traced_func_name}() failed at {_user_location()}: "
                f"{type(error).__name__}: {error}"
            ) from error
        raise BendingError(f"cannot trace a node of kind {kind!r}")

    def _record(self, proxy: ConcreteProxy, value: Any) -> None:
        proxy.value = value
        node = proxy.node
        self._values[node] = value
        if isinstance(value, torch.Tensor):
            node.type = node.type or torch.Tensor
            node.meta["shape"] = value.shape
            node.meta["dtype"] = value.dtype
        if node.type is None and type(value) in _ANNOTATED_TYPES:
            node.type = type(value)

    @contextlib.contextmanager
    def _traceable_constructors(self) -> Iterator[None]:
        """Make ``torch.zeros(x.shape[0], ...)`` and friends record a node when sized by proxies."""
        originals = {name: getattr(torch, name) for name in _CONSTRUCTORS}

        def traceable(constructor):
            @functools.wraps(constructor)
            def wrapper(*args, **kwargs):
                if _has_proxy(args, kwargs):
                    return self.create_proxy("call_function", constructor, args, kwargs)
                return constructor(*args, **kwargs)

            return wrapper

        for name, constructor in originals.items():
            setattr(torch, name, traceable(constructor))
        try:
            yield
        finally:
            for name, constructor in originals.items():
                setattr(torch, name, constructor)


def _concrete_value(arg: Any) -> Any:
    return arg.value if isinstance(arg, ConcreteProxy) else arg


#: A context that changes nothing: where an operation cannot reach fx's patches.
_AS_IS = contextlib.nullcontext()


def _reaches_patches(kind: str, target: Any, cargs: tuple[Any, ...]) -> bool:
    """Whether running one operation concretely may reach what symbolic tracing patches (a
    module's ``__call__`` and ``__getattr__``, functions wrapped for tracing), so that the patches
    must be reverted around it: a module call or an attribute read does, a tensor's method or a
    compiled torch, ``operator`` or ``math`` function does not. Reverting costs two assignments
    to ``nn.Module``'s special methods, each updating every subclass (0.6 ms): a RAVE-sized
    trace spent a second a build on them."""
    if kind == "call_method":
        return not (cargs and isinstance(cargs[0], torch.Tensor))
    if kind == "call_function":
        return not isinstance(target, types.BuiltinFunctionType)
    return True
