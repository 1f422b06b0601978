"""Real-time scheduling for the server's threads, best effort.

The audio thread (JACK's, or the threaded worker) runs at a real-time priority. Every other
thread of the server that takes the GIL must too, at a lower one: a normal thread that holds the
GIL and is preempted by another process keeps the audio thread waiting for the GIL for a whole
time slice (a priority inversion, measured: callbacks 10-16 ms apart during a burst of messages
on a loaded machine; 1 xrun instead of 9-26 with the control threads at a real-time priority).
Needs root or an ``rtprio`` limit (Debian's jackd2 package offers /etc/security/limits.d/audio.conf
for the audio group); without it the threads run at normal priority and a note is logged.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("bendserver.audio")

#: SCHED_FIFO priorities: JACK runs its server at 10 and clients just below; the threaded audio
#: worker sits under those, the OSC threads under the audio.
AUDIO_WORKER = 4
CONTROL = 2
#: The OSCQuery loop (HTTP, WebSocket, zeroconf): it takes the GIL too, less urgently.
DISCOVERY = 1


def set_realtime(priority: int, thread: threading.Thread | None = None) -> bool:
    """Give ``thread`` (default: the calling thread) SCHED_FIFO at ``priority``; False if the
    system refuses (no permission) or has no such scheduler."""
    native = threading.get_native_id() if thread is None else thread.native_id
    try:
        os.sched_setscheduler(native or 0, os.SCHED_FIFO, os.sched_param(priority))
    except (AttributeError, OSError) as error:
        log.info("thread %s runs without real-time priority (%s)", native, error)
        return False
    return True
