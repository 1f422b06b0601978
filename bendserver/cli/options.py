"""What the commands share: the argument types, the argparse parents (the model options
``-m/--rack/-p`` among them) and the steps before a command plays (its models chosen, probed)."""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

from ..limits import MAX_CHANNELS
from ..passes import OPTIMIZE_MODES

NO_FUSE = "no output fuse (NaN guard, DC blocker, limiter): the model's output as it is"


def whole(text: str, least: int) -> int:
    """An argument that is a whole number of at least ``least``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number is expected, got {text!r}") from None
    if value < least:
        bound = "above 0" if least == 1 else f"of at least {least}"
        raise argparse.ArgumentTypeError(f"a number {bound} is expected, got {value}")
    return value


def positive(text: str) -> int:
    """An argument that is a whole number above 0."""
    return whole(text, 1)


class AddVersion(argparse.Action):
    """``--add-version FILE``, repeatable. Its old spelling ``--version FILE`` hid the
    program's ``--version`` after a command: it still works for one release, saying so."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        if option == "--version":
            print(
                "bendserver: --version FILE is deprecated (it reads as bendserver --version) "
                "and goes in the next release: use --add-version FILE",
                file=sys.stderr,
            )
        setattr(namespace, self.dest, [*getattr(namespace, self.dest), values])


def port(text: str) -> int:
    """A network port: 0 (one the system chooses, or off where the option says so) to 65535."""
    value = whole(text, 0)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value}")
    return value


def channels(text: str) -> int:
    """A count of channels played: 1 to :data:`~bendserver.limits.MAX_CHANNELS`."""
    value = positive(text)
    if value > MAX_CHANNELS:
        raise argparse.ArgumentTypeError(f"at most {MAX_CHANNELS} channels are played, got {value}")
    return value


def milliseconds(text: str) -> float:
    """An argument that is a finite number of milliseconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of ms is expected, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"a finite number of ms from 0 is expected, got {text}")
    return value


def blocks(text: str) -> list[int]:
    """Block sizes separated by commas (``256,2048``)."""
    return [positive(b) for b in text.split(",")]


def samples(text: str) -> int:
    """An argument that is a whole number of samples, 0 or more."""
    return whole(text, 0)


def sizes(text: str) -> list[int]:
    """Sizes separated by commas, or ``0`` for none."""
    return [] if text.strip() == "0" else blocks(text)


def take_models(args: argparse.Namespace) -> None:
    """Repeated ``-m`` or ``--rack`` as ``args.rack`` (a RackSpec; None: one model), and
    ``args.model`` as the first model, for what takes one (:func:`bendserver.play.chosen`)."""
    if hasattr(args, "rack"):  # else a command of one model
        from ..play import chosen

        args.model, args.rack = chosen(args.model, args.rack)


def probe(args: argparse.Namespace) -> None:
    """Probe the model (each of a rack's) in a child process first (:mod:`bendserver.probe`),
    unless trusted."""
    if not args.trust_model:
        from ..probe import probe_model

        rack = getattr(args, "rack", None)
        models = [args.model] if rack is None else [node.model for node in rack.nodes]
        for model in dict.fromkeys(models):
            probe_model(model, args.models_dir)


def retune(args: argparse.Namespace) -> None:
    """``--retune``: the convolution forms the command meets are timed again."""
    if args.retune:
        from ..passes.convolution import retune as retune_forms

        retune_forms(time.time())


@dataclass(frozen=True)
class Parents:
    """The argparse parents commands take their shared options from."""

    common: argparse.ArgumentParser  #: --debug
    models: argparse.ArgumentParser  #: --models-dir, --latency (and --debug)
    racked: argparse.ArgumentParser  #: -m/--model (repeatable), --rack, -p/--preset
    trusting: argparse.ArgumentParser  #: --trust-model
    versions: argparse.ArgumentParser  #: --add-version
    optimizing: argparse.ArgumentParser  #: --optimize, --retune
    devices: argparse.ArgumentParser  #: --device
    threads: argparse.ArgumentParser  #: --threads


def parents() -> Parents:
    """The shared options, each parent once."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of an error instead of its one-line message",
    )
    models = argparse.ArgumentParser(add_help=False, parents=[common])
    models.add_argument(
        "--models-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="also look for model names in DIR (repeatable; before $BENDSERVER_MODELS, your "
        "models folder and the shipped models)",
    )
    models.add_argument(
        "--latency",
        type=samples,
        metavar="N",
        help="the model's latency in samples (default: its manifest's; a .ts file's is "
        "measured at load, which this skips)",
    )
    # What plays: one model, a chain (-m repeated) or a rack file, and its preset; the same
    # options for every command that plays (export, which also takes a model by position, and
    # stress, which takes one model, declare theirs).
    racked = argparse.ArgumentParser(add_help=False)
    racked.add_argument(
        "-m",
        "--model",
        action="append",
        help="model name or folder, model.method or file.ts:method; repeated: a chain in order",
    )
    racked.add_argument(
        "--rack", metavar="FILE", help="a rack file (TOML, docs/rack.md) or a shipped one's name"
    )
    racked.add_argument(
        "-p", "--preset", help="preset name or .json file (default: the model's; 'none': no preset)"
    )
    trusting = argparse.ArgumentParser(add_help=False)
    trusting.add_argument(
        "--trust-model",
        action="store_true",
        help="skip the probe that first loads and calls a model that is not shipped in a child "
        "process, to name a model whose code kills its process (docs/engine.md); serve: also "
        "for /model/load",
    )
    versions = argparse.ArgumentParser(add_help=False)
    versions.add_argument(
        "--add-version",
        "--version",
        dest="version",
        action=AddVersion,
        default=[],
        metavar="FILE",
        help="add the weights of FILE (.ts of the same architecture, or .safetensors) as a "
        "version named after it, for /version and /interp (repeatable; --version FILE, its "
        "old spelling, still works in this release)",
    )
    optimizing = argparse.ArgumentParser(add_help=False)
    optimizing.add_argument(
        "--optimize",
        choices=OPTIMIZE_MODES,
        default="passes",
        help="none: the bended graph as traced; passes (default): the optimising passes; "
        "compile: the passes, then torch.compile where it measures faster at load, said with "
        "its figures (CPU, needs a C++ compiler; docs/engine.md)",
    )
    optimizing.add_argument(
        "--retune",
        action="store_true",
        help="time again which form each convolution computes in on this machine (chosen once "
        "per shape and kept in the cache folder, so that a render writes the same bytes run "
        "after run; docs/engine.md)",
    )
    devices = argparse.ArgumentParser(add_help=False)
    devices.add_argument(
        "--device",
        default="cpu",
        help="where the model runs: cpu (default), cuda or cuda:N (pinned transfers, the "
        "bended graph captured as a CUDA graph; docs/engine.md)",
    )
    threads = argparse.ArgumentParser(add_help=False)
    threads.add_argument(
        "--threads",
        type=positive,
        default=1,
        help="torch threads (default 1: a second busy thread slows every call down)",
    )
    return Parents(common, models, racked, trusting, versions, optimizing, devices, threads)
