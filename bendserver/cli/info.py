"""``bendserver info``: a model's (or a rack's) methods, attributes, weights and activations."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import BendingError
from ..loader import DEFAULT_MODEL
from .options import Parents, probe


def _ring_latency(block: int, rate: int) -> str:
    """What serve's ring mode adds to the model's latency at least, at a device period of the
    block and the model's rate (the time a block needs comes from a warm-up at start: serve's
    banner and /stats say what the path adds)."""
    from ..audio.ring import prefill_frames, slack_frames

    frames = prefill_frames(slack_frames(0.0, 0.0, rate, block), block, block)
    ahead = -(-frames // block)
    return (
        f"serve     the ring mode adds {frames} samples ({1e3 * frames / rate:.2f} ms: {ahead} "
        f"block{'s' if ahead > 1 else ''} ahead) on a device period of {block} at {rate} Hz, "
        "more where the model's compute takes a good part of a block; the direct mode adds "
        "what the device's stream holds (a block of a duplex stream on JACK); the banner and "
        "/stats say what the path adds"
    )


def run(args: argparse.Namespace) -> int:
    """Print a model's methods, attributes, ring latency, weights and activations."""
    import torch

    from ..attributes import shown
    from ..play import PlayOptions
    from ..tracing.script import ConversionError

    probe(args)
    if args.rack is not None:
        return _info_rack(args)
    model = PlayOptions.of(args).load()
    print(f"{model.name}: {model.description}")
    print(
        f"sample rate {model.sample_rate} Hz, block {model.block}, latency {model.latency} "
        f"samples ({model.latency_source}), versions {model.bended.weight_bank.named_versions}, "
        f"preset {model.preset}"
    )
    for name, spec in model.methods.items():
        print(
            f"  {name}: {spec.in_channels} ch x 1/{spec.in_ratio} -> "
            f"{spec.out_channels} ch x 1/{spec.out_ratio}"
        )
    if model.attributes:
        print("attributes (nn~: set_<name>, get_<name>)")
    for spec in model.attributes.values():
        try:
            value = " = " + " ".join(str(shown(v)) for v in spec.read(model.module))
        except BendingError as error:
            value = "" if not spec.readable else f": {error}"
        print(f"  {spec.describe()}{value}")
    print(_ring_latency(model.block, model.sample_rate))
    print("\nweights")
    model.bended.print_weights()
    for name, spec in model.methods.items():
        argument = model.bended.argument_names(name)[0]
        example = torch.zeros(1, spec.in_channels, model.block // spec.in_ratio)
        try:
            model.bended.trace(name, **{argument: example})
        except ConversionError as error:
            print(f"\n{name}: not converted into a graph, plays as a direct scripted call: {error}")
            continue
        print(f"\nactivations of {name} (block {model.block})")
        model.bended.print_activations(name)
    if model.bended.folds:
        print(
            "\nlayer outputs (no method converted: per-channel Mask, Scale, Bias, Affine, Invert "
            "fold into these layers' weights; other activation ops need the Python model)"
        )
        model.bended.print_activations()
    return 0


def _info_rack(args: argparse.Namespace) -> int:
    """A rack's nodes, edges, what each carries, and its latency."""
    from ..play import PlayOptions
    from ..rackspec import counted

    rack, _ = PlayOptions.of(args).build()
    print(f"rack of {counted(rack)}, block {rack.block}, {rack.sample_rate} Hz")
    for name in rack.order:
        node = rack.nodes[name]
        spec = node.spec
        print(
            f"  {name}: {node.model.name}.{node.method}, {spec.in_channels} ch x "
            f"1/{spec.in_ratio} -> {spec.out_channels} ch x 1/{spec.out_ratio}, latency "
            f"{node.latency} samples"
        )
    for edge in rack.edges:
        gain = "" if edge.gain == 1.0 else f" x {edge.gain:g}"
        print(f"  {edge.source} -> {edge.target}{gain}")
    ms = 1e3 * rack.latency / rack.sample_rate
    print(f"latency {rack.latency} samples ({ms:.2f} ms), the longest path's")
    return 0


def add_parser(commands: Any, p: Parents) -> None:
    """The ``info`` command and its options."""
    info = commands.add_parser(
        "info", parents=[p.models, p.trusting], help="print a model's weights and activations"
    )
    info.add_argument("model", nargs="?", default=DEFAULT_MODEL, help="model name or folder")
    info.add_argument("--rack", metavar="FILE", help="print a rack file's nodes and latency")
    info.set_defaults(run=run)
