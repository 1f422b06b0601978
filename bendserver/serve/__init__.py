"""``bendserver serve``: a model (or a rack) played live, controlled over OSC.

:class:`Server` (:mod:`.server`) puts the parts together and tears them down, from
:class:`ServeOptions` (:mod:`.options`); :mod:`.report` says what it runs and counts;
:func:`run` serves until Ctrl-C, SIGTERM or ``--duration``.
"""

from __future__ import annotations

from .options import LATENCY_MODES, ServeOptions
from .server import OSCQUERY_OFFSET, Server, run

__all__ = ["LATENCY_MODES", "OSCQUERY_OFFSET", "ServeOptions", "Server", "run"]
