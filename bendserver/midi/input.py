"""MIDI in: a control source that feeds the same path as OSC.

:class:`MidiInput` opens a MIDI input with python-rtmidi (JACK MIDI when a JACK server runs,
else the system's own: ALSA's sequencer, CoreMIDI, Windows MM): a virtual port named
``bendserver`` where the system has them, or an existing port by name. A thread of its own
polls it (RtMidi queues what arrives: no Python runs in JACK's process thread, which would wait
there for the interpreter lock), parses each message with mido, and turns it through the
controller's :class:`~bendserver.midi.mappings.MidiMap` (learn, mappings) into control messages
that it hands to the control worker as an in-process sender: they are coalesced per address,
checked, and applied at block boundaries exactly as OSC messages are, never on the audio thread.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import time
from collections.abc import Iterator

from ..audio.gate import ComputeGate
from ..audio.priority import CONTROL, set_realtime
from ..control import Controller
from ..errors import BendingError
from ..osc.packets import Incoming
from ..osc.worker import LOCAL, ControlWorker
from ..threads import LoopThread

log = logging.getLogger("bendserver.midi")

#: The virtual port's client and port names (JACK shows ``bendserver:midi_in``).
CLIENT, PORT = "bendserver", "midi_in"
#: Seconds between two polls of an idle input (at most this much is added to a message's way).
POLL = 0.001
#: Messages RtMidi holds between two polls before it drops one.
QUEUE = 4096


class MidiInput(LoopThread):
    """An open MIDI input (``port``: part of an existing port's name; None or "": a virtual
    port) whose messages go through ``controller.midi`` to ``worker``; ``gate``: read only while
    no block is computed."""

    def __init__(
        self,
        controller: Controller,
        worker: ControlWorker,
        gate: ComputeGate | None = None,
        port: str | None = None,
    ) -> None:
        try:
            import rtmidi  # the server imports it only with --midi
        except ImportError as error:  # on Linux its library needs ALSA's (libasound2)
            raise BendingError(
                f"MIDI needs python-rtmidi ({error}): pip install python-rtmidi; on Linux with "
                "ALSA's library (Debian: libasound2)"
            ) from None

        self.controller, self.worker, self.gate = controller, worker, gate
        self.api, self._in = _open_api(rtmidi)
        try:
            self.name = self._open(rtmidi, port)
        except BaseException:
            self._in.delete()
            raise
        self._in.ignore_types(sysex=True, timing=True, active_sense=True)
        self.received = 0  #: MIDI messages read
        self.ignored = 0  #: messages that map to nothing or could not be read
        #: Arrival times (``time.monotonic()``) of the last messages read.
        self.arrivals: collections.deque[float] = collections.deque(maxlen=4096)
        controller.midi_port = self.name
        super().__init__("midi-in")

    def _open(self, rtmidi, port: str | None) -> str:
        """Open the virtual port or the port named ``port``; returns what it is called."""
        if not port:
            try:
                self._in.open_virtual_port(PORT)
            except (NotImplementedError, rtmidi.RtMidiError) as error:  # Windows MM
                raise BendingError(
                    f"MIDI ({self.api}) has no virtual ports ({error}): name an input with "
                    f"--midi PORT; inputs: {self._in.get_ports()}"
                ) from None
            return f"{CLIENT}:{PORT} (virtual, {self.api})"
        names = self._in.get_ports()
        found = [i for i, name in enumerate(names) if port.lower() in name.lower()]
        if len(found) != 1:
            which = "no MIDI input" if not found else "several MIDI inputs"
            raise BendingError(f"{which} named like {port!r}; inputs: {names}")
        try:
            self._in.open_port(found[0], PORT)
        except rtmidi.RtMidiError as error:
            raise BendingError(f"cannot open MIDI input {names[found[0]]!r}: {error}") from None
        return f"{names[found[0]]} ({self.api})"

    def _run(self) -> None:
        import mido

        take, stop, gate, worker = self._in.get_message, self._stop, self.gate, self.worker
        while not stop.is_set():
            if gate is not None:  # read between blocks: the audio has the interpreter meanwhile
                gate.wait_computed(0.05)
            item = take()
            if item is None:
                time.sleep(POLL)
                continue
            arrival, queued = time.monotonic(), False
            while item is not None:  # what came meanwhile (JACK: a period's worth at once)
                self.arrivals.append(arrival)
                self.received += 1
                try:
                    message = mido.Message.from_bytes(item[0])
                    messages = self.controller.midi.translate(message, arrival)
                except (ValueError, TypeError):  # a message mido cannot read (a stray byte)
                    messages = []
                self.ignored += not messages
                for address, args in messages:  # coalesced in the inbox, one wake-up for all
                    worker.submit(Incoming(address, tuple(args)), LOCAL, arrival, wake=False)
                    queued = True
                item = take()
            if queued:
                worker.wake()

    def start(self) -> None:
        """Start polling, at the control worker's real-time priority where allowed (a thread
        that takes the interpreter lock must not be preempted holding it: audio.priority)."""
        super().start()
        set_realtime(CONTROL, self.thread)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop polling and close the port."""
        super().stop(timeout)
        self.controller.midi_port = None
        self._in.close_port()
        self._in.delete()

    def counters(self) -> dict[str, float]:
        """MIDI messages read, and those that moved nothing."""
        return {"midi": self.received, "midi_ignored": self.ignored}


def _open_api(rtmidi) -> tuple[str, object]:
    """A MIDI input client named ``bendserver``: on the JACK server that runs (the one
    ``JACK_DEFAULT_SERVER`` names), else on the system's own MIDI."""
    with _quiet_stderr():  # libjack and ALSA's library print their attempts
        if rtmidi.API_UNIX_JACK in rtmidi.get_compiled_api():  # else RtMidi picks another
            try:
                return "JACK", rtmidi.MidiIn(rtmidi.API_UNIX_JACK, CLIENT, QUEUE)
            except rtmidi.RtMidiError:
                pass
        try:
            midi_in = rtmidi.MidiIn(rtmidi.API_UNSPECIFIED, CLIENT, QUEUE)
        except rtmidi.RtMidiError as error:
            failed = error
        else:
            return rtmidi.get_api_display_name(midi_in.get_current_api()), midi_in
    raise BendingError(
        f"no MIDI: no JACK server runs and the system's MIDI did not open ({failed}); on "
        "Linux, load the ALSA sequencer (modprobe snd-seq) or start JACK"
    )


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Descriptor 2 sent to /dev/null while the block runs (a library's own prints)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
