"""Extended fx tracing: concrete values beside the proxies, frozen control flow, guards."""

from .flow import FlowStep, LogicalFlowStep, LoopFlowStep, ValueFlowStep, is_guard
from .tracer import BendingTracer, ConcreteProxy, restoring_buffers

__all__ = [
    "BendingTracer",
    "ConcreteProxy",
    "FlowStep",
    "LogicalFlowStep",
    "LoopFlowStep",
    "ValueFlowStep",
    "is_guard",
    "restoring_buffers",
]
