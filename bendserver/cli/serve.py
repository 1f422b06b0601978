"""``bendserver serve``: a model or a rack played live, controlled over OSC."""

from __future__ import annotations

import argparse
from typing import Any

from ..files import check_writable
from .options import NO_FUSE, Parents, channels, milliseconds, port, positive, probe, retune


def run(args: argparse.Namespace) -> int:
    """Serve what the options name until stopped (:func:`bendserver.serve.run`)."""
    from ..serve import ServeOptions
    from ..serve import run as serve

    if args.record:
        check_writable(args.record)
    probe(args)
    retune(args)
    options = ServeOptions(
        **{k: v for k, v in vars(args).items() if k in ServeOptions.__dataclass_fields__}
    )
    return serve(options)


def add_parser(commands: Any, p: Parents) -> None:
    """The ``serve`` command and its options."""
    serve = commands.add_parser(
        "serve",
        parents=[p.models, p.racked, p.trusting, p.versions, p.threads, p.optimizing, p.devices],
        help="play a model live, controlled over OSC",
    )
    serve.add_argument("--osc-host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--osc-port", type=port, default=9000, help="OSC port to listen on")
    serve.add_argument("--reply-port", type=port, default=9001, help="port replies go to")
    serve.add_argument(
        "--oscquery-port",
        type=port,
        help="HTTP/WebSocket port of the OSCQuery namespace (default: the OSC port + 10; 0: off)",
    )
    serve.add_argument(
        "--no-zeroconf",
        dest="zeroconf",
        action="store_false",
        help="do not advertise OSCQuery over mDNS (clients then connect by address)",
    )
    serve.add_argument("--reply-host", help="host replies go to (default: the sender's)")
    serve.add_argument(
        "--midi",
        nargs="?",
        const="",
        metavar="PORT",
        help="take MIDI in: a virtual port named bendserver (JACK MIDI when a JACK server "
        "runs), or an input named like PORT; map controls with /midi/learn (docs/midi.md)",
    )
    serve.add_argument("--audio", help="device or host API name (e.g. jack), or null")
    serve.add_argument("--input", default="silence", help="input device, sound file or silence")
    serve.add_argument("--block", type=positive, help="model block size (default: the model's)")
    serve.add_argument("--device-block", type=positive, help="frames per callback (default: block)")
    serve.add_argument(
        "--output-channels",
        type=positive,
        help="device outputs to open (default: all of them for a mono model, which plays on each)",
    )
    serve.add_argument(
        "--channels",
        type=channels,
        help="channels played, one stream of the model each (default: the --input file's; "
        "one for silence or a device)",
    )
    serve.add_argument(
        "--xfade-ms",
        type=milliseconds,
        default=50.0,
        help="/model/load crossfades from the playing model to the new one over this many ms "
        "(default 50; 0: at a block boundary, no fade)",
    )
    serve.add_argument("--record", help="write the output to this sound file")
    serve.add_argument(
        "--record-score",
        metavar="FILE",
        help="write every change applied, at its block, as a score (render --score FILE "
        "--block N over the same input plays the same samples)",
    )
    serve.add_argument(
        "--force", action="store_true", help="overwrite the --record (--record-score) file"
    )
    serve.add_argument(
        "--latency-mode",
        choices=["ring", "direct", "threaded"],
        help="ring (the default on a device): the device callback is C and copies between "
        "rings, the model computes --ahead blocks ahead on its own thread, at any block and "
        "rate; direct (the default on the null backend): the model runs in a Python callback; "
        "threaded: on a worker, one device block later",
    )
    serve.add_argument(
        "--ahead",
        type=positive,
        help="ring mode: model blocks computed ahead of what plays (default: those that last "
        "7 ms plus a block's compute, at least one; each adds a block of latency and absorbs "
        "that much jitter)",
    )
    serve.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="CIDR",
        help="also accept OSC from this network (repeatable); loopback is always allowed",
    )
    serve.add_argument(
        "--allow-code-from",
        action="append",
        default=[],
        metavar="DIR",
        help="/model/load and /<node>/load may import Python code (a model folder, "
        "file.py:Class) from DIR (repeatable); without it they load model names and "
        "TorchScript files only (docs/security.md)",
    )
    serve.add_argument("--duration", type=float, help="stop after this many seconds")
    serve.add_argument("--no-fuse", action="store_true", help=NO_FUSE)
    serve.add_argument(
        "--frame-rate",
        type=float,
        default=100.0,
        help="methods at a control rate (features, encode): frames a second each sends over "
        "OSC at most (/out/<node>/<method>; default 100)",
    )
    serve.add_argument(
        "--seed",
        type=int,
        help="torch's random seed when the audio starts, for models that draw noise (RAVE's "
        "encoder): the same input then gives the same output",
    )
    serve.set_defaults(run=run)
