"""The baseline rows of ``bendserver stress``: the machine's floor for any client, JACK's example
client in C, and a client with no torch doing the server's work in numpy
(:mod:`bendserver.measure.reference`), on the same JACK server.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..audio.jackclient import JackXruns
from ..errors import BendingError
from .loads import send_load
from .report import Row
from .served import jack_env

#: Not a load on the server: a client with no torch and no server doing the server's median
#: compute time of plain numpy work per block on the same JACK server (what the machine does
#: to any client), measured after the server's rows of its block size.
REFERENCE = "reference"


#: Not a load either: JACK's example client in C (``jack_simple_client``, a sine from a table),
#: the machine's floor for any client, measured the same way (JACK's own xrun count), once with
#: no OSC and once under each OSC load of the run (the load client sending at the same rate to
#: a port that nobody reads: the machine as busy with the sender as in the server's row).
C_REFERENCE = "c"


_REFERENCE = Path(__file__).parent / "reference.py"


def c_client_row(
    jack: str, watch: JackXruns, block: int, seconds: float, load: str, ranges: list
) -> Row:
    """``jack_simple_client`` for ``seconds`` on JACK server ``jack``, with the load client of
    ``load`` sending meanwhile to a port nobody reads (the kernel drops what its buffer cannot
    hold): JACK's xruns meanwhile."""
    if shutil.which("jack_simple_client") is None:
        raise BendingError("the C reference row needs jack_simple_client (Debian: jackd2)")
    before = watch.count
    client = subprocess.Popen(
        ["jack_simple_client", "bendstress-c", jack],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=jack_env(jack),
    )
    sent = 0
    try:
        if load == "0":
            time.sleep(seconds)
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as nobody:
                nobody.bind(("127.0.0.1", 0))
                sent = send_load(nobody.getsockname()[1], load, seconds, ranges, 0.5)
    finally:
        client.terminate()
        client.wait(timeout=10)
    label = C_REFERENCE if load == "0" else f"{C_REFERENCE}+{load}"
    return Row(
        block, "C client", label, sent, 0, 0, "-", watch.count - before, -1, -1, 0, 0, 0.0, "-",
        0.0, 0.0, 0.0, 0.0, 0.0,
    )  # fmt: skip


def numpy_client_row(
    jack: str, watch: JackXruns, block: int, seconds: float, work_ms: float
) -> Row:
    """The reference client's row (:mod:`bendserver.measure.reference`) on JACK server ``jack``."""
    env = jack_env(jack)
    before = watch.count
    client = subprocess.run(
        [sys.executable, str(_REFERENCE), str(block), str(seconds), str(work_ms)],
        capture_output=True,
        text=True,
        env=env,
    )
    if client.returncode != 0:
        raise BendingError(f"the reference client failed: {client.stderr.strip()[-500:]}")
    figures = dict(word.split("=") for word in client.stdout.split())
    return Row(
        block, "numpy client", REFERENCE, 0, 0, 0, "-", watch.count - before,
        int(figures["xruns"]), int(figures["xruns"]), 0, int(figures["late"]), 0.0, "-",
        *(float(figures[k]) for k in ("p50_ms", "p99_ms", "max_ms", "jitter_p99_ms",
                                      "jitter_max_ms")),
    )  # fmt: skip
