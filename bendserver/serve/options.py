"""What ``bendserver serve`` takes: :class:`ServeOptions` (the command's options by name)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..loader import DEFAULT_MODEL
from ..osc.frames import FRAME_RATE

#: ``ring``: the device callback is C and copies between rings, the engine computes ahead on its
#: own thread (the default on a device); ``direct``/``threaded``: a Python callback (the null
#: backend's, which has no C callback to run).
LATENCY_MODES = ("ring", "direct", "threaded")


@dataclass
class ServeOptions:
    """What ``bendserver serve`` takes (see ``bendserver serve --help``)."""

    model: str = DEFAULT_MODEL
    preset: str | None = None  #: None: the model's own preset; "none": no preset
    method: str = "forward"
    osc_host: str = "127.0.0.1"
    osc_port: int = 9000
    reply_port: int = 9001
    reply_host: str | None = None  #: None: the sender's host
    #: OSCQuery's HTTP port; None: the OSC port + 10 (any free one with an ephemeral OSC
    #: port, or when that one is taken); 0: no OSCQuery.
    oscquery_port: int | None = None
    zeroconf: bool = True  #: advertise OSCQuery over mDNS (``_oscjson._tcp``)
    audio: str | None = None  #: device or host API name, "null", or None for the default
    input: str = "silence"  #: "silence", a sound file (looped), or an input device name
    block: int | None = None  #: the model's block (None: the model's native block)
    device_block: int | None = None  #: frames per callback (None: the model's block)
    record: str | None = None
    #: A score of every change applied (``render --score`` plays the take again).
    record_score: str | None = None
    force: bool = False
    latency_mode: str | None = None  #: None: ring on a device, direct on the null backend
    #: Ring mode: model blocks computed ahead of what the device plays (None: those that last
    #: 7 ms plus a block's compute, at least one).
    ahead: int | None = None
    allow: list[str] = field(default_factory=list)
    duration: float | None = None
    #: Device output channels (None: every channel of the device for a mono model).
    output_channels: int | None = None
    #: Channels played, one stream of the model each (None: the input file's, else one).
    channels: int | None = None
    threads: int = 1  #: torch threads of the process (one: see docs/serve.md)
    no_fuse: bool = False  #: play the model's output without the output fuse
    optimize: str = "passes"  #: how the bended graph is optimised (none, passes, compile)
    device: str = "cpu"  #: where the model runs: cpu, cuda or cuda:N
    models_dir: list[str] = field(default_factory=list)  #: more folders to find model names in
    version: list[str] = field(default_factory=list)  #: weight files added as versions
    latency: int | None = None  #: the model's latency in samples (None: its own, or measured)
    midi: str | None = None  #: a MIDI input: "" a virtual port, else part of a port's name
    xfade_ms: float = 50.0  #: ``/model/load``'s crossfade from the old model to the new
    trust_model: bool = False  #: ``/model/load`` skips the probe in a child process
    #: Folders a live load may import Python code from, beside the model folders (loads name
    #: their model in a message: by default only names and TorchScript files load).
    allow_code_from: list[str] = field(default_factory=list)
    #: A rack of several nodes (repeated ``-m``, ``--rack``: a RackSpec) played instead of
    #: ``model``; None: the one model.
    rack: Any = None
    #: Frames a second each stream of a method at a control rate sends at most over OSC.
    frame_rate: float = FRAME_RATE
    #: torch's random seed when the audio starts (models that draw noise); None: not set.
    seed: int | None = None
