"""``bendserver export``: a bended model, or a rack, as an nn~ TorchScript file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import BendingError
from .options import Parents, positive


def run(args: argparse.Namespace) -> int:
    """Write the model (or the rack) as one nn~ file, naming its attributes."""
    from ..export.model import export_model
    from ..export.rack import export_rack

    output = Path(args.output)
    if output.exists() and not args.force:
        raise BendingError(f"{output} exists: give --force to replace it")
    if args.rack is not None:
        attributes = export_rack(args.rack, output, args.block, args.models_dir, args.preset)
    else:
        attributes = export_model(
            args.model, output, args.preset, args.block, args.models_dir, args.latency
        )
    print(f"wrote {output} (nn~ attributes: {', '.join(attributes) or 'none'})")
    return 0


def add_parser(commands: Any, p: Parents) -> None:
    """The ``export`` command and its options."""
    export = commands.add_parser(
        "export",
        parents=[p.models],
        help="write a bended model, or a rack, as an nn~ TorchScript file (its ops' parameters "
        "as attributes)",
    )
    export.add_argument(
        "model",
        nargs="?",
        action="append",  # one list with -m's, in the command line's order
        default=argparse.SUPPRESS,  # else an absent one would undo -m
        help="model name, folder, file.py:Class or .ts file",
    )
    export.add_argument(
        "-m",
        "--model",
        action="append",
        dest="model",
        help="a model as above, model.method or file.ts:method; repeated: a chain in order, "
        "exported as one file (its attributes <node>_<op>_<param>)",
    )
    export.add_argument(
        "--rack", metavar="FILE", help="a rack file (TOML, docs/rack.md) or a shipped one's name"
    )
    export.add_argument(
        "-p",
        "--preset",
        help="preset name or .json file (default: the model's; 'none': no preset); of a rack, "
        "its first node's where the rack file gives none",
    )
    export.add_argument("-o", "--output", required=True, help="the .ts file to write")
    export.add_argument(
        "--block",
        type=positive,
        help="block size a Python model (every rack) is exported for (default: the (first) "
        "model's)",
    )
    export.add_argument("--force", action="store_true", help="replace an existing file")
    export.set_defaults(run=run)
