"""The control page: a browser view of the live namespace, served on the OSCQuery port.

The page (``static/``: plain HTML, JavaScript and CSS, no build step, nothing fetched from
elsewhere) builds its controls from the OSCQuery namespace and follows it over the OSCQuery
WebSocket; :mod:`bendserver.ui.meters` makes the levels, compute times and spectrum it shows.
"""

from .meters import Meters
from .page import page_files

__all__ = ["Meters", "page_files"]
