"""The private torch details bendserver relies on, in one place (each tested in test_passes)."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from torch import nn

# -- fx tracing (bendserver.tracing.tracer) ----------------------------------------------------


def fx_patches_reverted() -> contextlib.AbstractContextManager:
    """A context in which the functions fx patches while it traces (``torch.nn.Module.__call__``
    and the autowrapped ones) are torch's own again: the tracer runs each recorded operation on
    concrete values there."""
    from torch.fx._symbolic_trace import _maybe_revert_all_patches

    return _maybe_revert_all_patches()


def tree_leaves(tree: Any) -> list[Any]:
    """The leaves of nested tuples, lists and dicts, in torch's own order (its pytree)."""
    from torch.utils._pytree import tree_flatten

    return tree_flatten(tree)[0]


def has_forward_hooks(module: nn.Module) -> bool:
    """True when ``module`` has its own forward or forward-pre hooks (torch has no public way to
    ask): an optimised graph calls such a module through ``__call__`` so that its hooks run."""
    return bool(module._forward_hooks or module._forward_pre_hooks)


# -- TorchScript IR (the .ts converter, bendserver.tracing.script) ------------------------------

#: c10's ScalarType, Layout and MemoryFormat enums by number: TorchScript IR passes them as ints.
_SCALAR_TYPES = (
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
    torch.float32, torch.float64, torch.complex32, torch.complex64, torch.complex128,
    torch.bool, torch.qint8, torch.quint8, torch.qint32, torch.bfloat16,
)  # fmt: skip
_LAYOUTS = (torch.strided, torch.sparse_coo)
_MEMORY_FORMATS = (
    torch.contiguous_format, torch.preserve_format, torch.channels_last, torch.channels_last_3d
)  # fmt: skip
_ENUMS = {"ScalarType": _SCALAR_TYPES, "Layout": _LAYOUTS, "MemoryFormat": _MEMORY_FORMATS}


def script_methods(module: torch.jit.ScriptModule) -> list[str]:
    """The names of a scripted module's methods."""
    return list(module._c._method_names())


def script_method_graph(module: torch.jit.ScriptModule, name: str) -> torch._C.Graph:
    """The TorchScript IR of one method of a scripted module (not inlined: submodule calls
    stay ``prim::CallMethod``, so their module paths are known)."""
    return module._c._get_method(name).graph


def script_function_graph(node: torch._C.Node) -> torch._C.Graph:
    """The body of the function a ``prim::CallFunction`` node calls, as a graph of its own
    (the call cloned into an empty graph and inlined there: IR has no other way to it)."""
    graph = torch._C.Graph()
    function = node.inputsAt(0)
    constant = graph.createClone(function.node(), lambda value: value)
    graph.insertNode(constant)
    inputs = {}
    for value in list(node.inputs())[1:]:
        inputs[value.unique()] = graph.addInput()
        inputs[value.unique()].setType(value.type())
    call = graph.createClone(
        node,
        lambda v: constant.output() if v.unique() == function.unique() else inputs[v.unique()],
    )
    graph.insertNode(call)
    for output in call.outputs():
        graph.registerOutput(output)
    torch._C._jit_pass_inline(graph)
    return graph


def ir_name(node: torch._C.Node) -> str:
    """A ``prim::GetAttr``/``SetAttr``/``CallMethod`` node's name attribute."""
    return node.s("name")


def ir_constant(node: torch._C.Node) -> object:
    """A ``prim::Constant`` node's value (None for None)."""
    output = node.output()
    return output.toIValue() if node.hasAttributes() else None


def ir_schema(node: torch._C.Node) -> torch._C.FunctionSchema | None:
    """The operator schema an IR node was matched to, or None (prim ops without one)."""
    try:
        return node.schema() and torch._C.parse_schema(node.schema())
    except RuntimeError:
        return None


def ir_enum(type_name: str, value: object) -> object:
    """An int that IR passes for a ScalarType, Layout or MemoryFormat, as the torch object (other
    values as they are)."""
    for name, table in _ENUMS.items():
        if name in type_name and isinstance(value, int) and not isinstance(value, bool):
            return table[value]
    return value


def dtype_number(dtype: torch.dtype) -> int:
    """A dtype as the ScalarType number IR compares (``prim::dtype``)."""
    return _SCALAR_TYPES.index(dtype)


def rename_fx_node(node: torch.fx.Node, name: str) -> None:
    """Give an fx node another name (fx makes it unique); fx has no public rename."""
    node._rename(name)


def unlink_fx_node(node: torch.fx.Node) -> None:
    """Drop what an fx node no one uses any more refers to (its neighbours in its graph's list,
    its arguments, users and meta): fx's nodes refer to each other both ways, a reference
    cycle that reference counting frees once each node of it is unlinked (fx has no public way
    to, for a node its graph let go of already)."""
    node._prev = node._next = None
    node._args, node._kwargs = (), {}
    node._input_nodes, node.users, node.meta = {}, {}, {}


def writes_first_argument(target: object) -> bool:
    """True for an operator (``torch.ops.aten.copy_.default``) that writes into its first
    argument, as its schema says."""
    schema = getattr(target, "_schema", None)
    if not isinstance(schema, torch._C.FunctionSchema) or not schema.arguments:
        return False
    alias = schema.arguments[0].alias_info
    return alias is not None and alias.is_write


def returns_view(target: object) -> bool:
    """True for an operator (``torch.ops.aten.slice.Tensor``) whose result may be a view of its
    first argument (writing into the result writes into it), as its schema says."""
    schema = getattr(target, "_schema", None)
    if not isinstance(schema, torch._C.FunctionSchema) or not schema.arguments:
        return False
    alias = schema.arguments[0].alias_info
    returned = schema.returns[0].alias_info if schema.returns else None
    return alias is not None and not alias.is_write and returned is not None


def makes_a_tensor(target: object) -> bool:
    """True for an operator that makes a tensor from no tensor and takes a ``device``
    (``torch.ops.aten.scalar_tensor.default``, ``zeros``, ``full``), as its schema says."""
    schema = getattr(target, "_schema", None)
    if not isinstance(schema, torch._C.FunctionSchema) or not schema.arguments:
        return False
    names = [argument.name for argument in schema.arguments]
    first = schema.arguments[0].type
    return "device" in names and not isinstance(first, torch.TensorType)


def aten_name(target: object) -> str | None:
    """The operator name of an ``aten`` overload (``torch.ops.aten.slice.Tensor`` gives
    ``"slice"``), or None for anything else."""
    if not isinstance(target, torch._ops.OpOverload):
        return None
    namespace, _, name = target._schema.name.partition("::")
    return name if namespace == "aten" else None


def aten_overload_ambiguous(target: torch._ops.OpOverload) -> bool:
    """True when a call by name with this overload's positional arguments could resolve to
    another overload: it takes a positional ``Scalar`` and its name has other overloads than
    ``out=`` ones (``torch.add(x, 2, 1)`` for ``aten.add.Scalar`` finds a deprecated form)."""
    positional = [a for a in target._schema.arguments if not a.kwarg_only]
    scalar = any(t in str(a.type) for a in positional for t in ("number", "Scalar"))
    names = target.overloadpacket.overloads()
    others = [n for n in names if n != "out" and not n.endswith("_out")]  # out= never by name
    return scalar and len(others) > 1


def nn_function(name: str) -> object | None:
    """torch's C function of an ``aten`` operator that only ``torch._C._nn`` holds
    (``leaky_relu``, ``softplus``: ``torch.nn.functional`` wraps them in Python), or None."""
    return getattr(torch._C._nn, name, None)


def script_holder(
    tensors: list[torch.Tensor],
    sources: list[str],
    resolve: Callable[[str], Any],
    between: Callable[[], None],
) -> torch.jit.ScriptModule:
    """A scripted module holding ``tensors`` as ``t``, with each method of ``sources`` compiled
    on it (``between`` called before each), its free names resolved by ``resolve``. Its class
    and methods live in a compilation unit of its own, freed with the module: what
    ``torch.jit.script`` compiles stays in TorchScript's global unit for good (a live load of
    wavae left 2 MiB there)."""
    module = torch._C.ScriptModule("ScriptedRuns", torch._C.CompilationUnit(), True)
    module._register_attribute("t", torch._C.ListType(torch._C.TensorType.get()), tensors)
    own = torch._C.ConcreteModuleType.from_jit_type(module._type())
    for source in sources:
        between()
        module._define(own, source, resolve)
    return torch.jit._recursive.wrap_cpp_module(module)


def script_functions_kept() -> int:
    """How many functions and methods TorchScript's global compilation unit holds: what is
    compiled there is kept until the process ends."""
    return len(torch.jit._state._python_cu.get_functions())


def script_optimizing(optimize: bool) -> bool:
    """Whether TorchScript's executor optimises what this thread calls from now on
    (``torch.jit.optimized_execution`` without a context manager's cost, about 5 us); returns
    the setting before."""
    before = torch._C._get_graph_executor_optimize()
    torch._C._set_graph_executor_optimize(optimize)
    return before


# -- fx code generation (bendserver.codegen) -------------------------------------------------------


#: fx's own ``_exec_with_source``, and the compiler routed in its place (None: fx's own).
_FX_EXEC: Callable[..., None] | None = None
_fx_compiler: Callable[[str, str], types.CodeType] | None = None


def route_fx_compile(
    compiler: Callable[[str, str], types.CodeType] | None,
) -> Callable[[str, str], types.CodeType] | None:
    """Have fx compile the code it generates for a graph module (``recompile``) with
    ``compiler(source, filename)`` instead of ``compile`` (None: fx's own again); fx's own steps
    around it (the source kept for tracebacks, the code run in the module's globals) stay.
    Returns the compiler routed before. fx has no public hook."""
    global _FX_EXEC, _fx_compiler
    import torch.fx.graph_module as graph_module

    if _FX_EXEC is None:
        _FX_EXEC = graph_module._exec_with_source
    previous, _fx_compiler = _fx_compiler, compiler
    if compiler is None:
        graph_module._exec_with_source = _FX_EXEC
        return previous

    def exec_with_source(
        src: str, globals: dict[str, Any], co_fields: dict[str, Any] | None = None
    ) -> None:
        key = graph_module._loader.cache(src, globals, co_fields)
        exec(compiler(src, key), globals)

    graph_module._exec_with_source = exec_with_source
    return previous


_FX_CREATE_NODE: Callable[..., Any] | None = None


def call_at_each_fx_node(hook: Callable[[], None] | None) -> None:
    """Call ``hook()`` before fx adds each node to a graph (tracing, copying, a pass; None: no
    more): long graph work can then pause at a node, where fx itself has no point to pause."""
    global _FX_CREATE_NODE
    graph = torch.fx.Graph
    if _FX_CREATE_NODE is None:
        _FX_CREATE_NODE = graph.create_node
    if hook is None:
        graph.create_node = _FX_CREATE_NODE
        return
    create = _FX_CREATE_NODE

    def create_node(self: torch.fx.Graph, *args: Any, **kwargs: Any) -> torch.fx.Node:
        hook()
        return create(self, *args, **kwargs)

    graph.create_node = create_node
