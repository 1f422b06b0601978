"""Real-time audio for the server: backends, the callback, processors, clock, recording.

On a device the default is the ring mode (:mod:`.ring`): rtmixer's C callback copies between
the device and two rings, and a compute thread runs the engine ahead. Otherwise a backend (a
PortAudio stream, or the null backend clocked in real time) calls one :class:`AudioCallback`,
which feeds a processor (the engine in the callback, or on a worker thread), marks the
:class:`AudioClock` that timetags are converted with, and counts xruns.
"""

from .backends import DeviceBackend, NullBackend, has_default_output, output_devices
from .callback import AudioCallback, BlockLog
from .clock import AudioClock
from .devices import Device, find_device
from .gate import Admission, ComputeGate
from .processors import DirectProcessor, ThreadedProcessor
from .recorder import Recorder
from .sources import Loop, Silence, file_loop

__all__ = [
    "Admission",
    "AudioCallback",
    "AudioClock",
    "BlockLog",
    "ComputeGate",
    "Device",
    "DeviceBackend",
    "DirectProcessor",
    "Loop",
    "NullBackend",
    "Recorder",
    "Silence",
    "ThreadedProcessor",
    "file_loop",
    "find_device",
    "has_default_output",
    "output_devices",
]
