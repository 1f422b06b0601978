"""The WebSocket clients of the OSCQuery port (the page, OSCQuery browsers), each served from a
bounded queue of its own.

A client that reads slowly or not at all (a phone gone to sleep, a stalled tab) must never hold
up the others or the server's stop. What the service pushes goes into the client's queue without
waiting, and a task of the client's own sends it: meters are dropped while the client has
something left to read (it gets the newest once it caught up); a value or path change that finds
its queue full (:data:`~bendserver.limits.PAGE_QUEUE`), or a send that waits longer than
:data:`~bendserver.limits.PAGE_SEND_SECONDS`, closes the client at once (a page reconnects and
reads the state afresh). Runs on the OSCQuery service's asyncio loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from ..limits import PAGE_LISTENS, PAGE_QUEUE, PAGE_SEND_SECONDS

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger("bendserver.oscquery")


class Client:
    """One WebSocket client of ``request``: what it listens to (path -> the value it was sent
    last), whether it asked for meters, and its queue with the task that sends it."""

    def __init__(self, socket: web.WebSocketResponse, request: web.Request) -> None:
        self.socket = socket
        self.peer = request.remote or "?"
        self._transport = request.transport
        self.listening: dict[str, list[Any] | None] = {}
        self.metered = False
        self.closed = False
        self.dropped = 0  #: meters not sent: the client had something left to read
        self._queue: asyncio.Queue[str | bytes] = asyncio.Queue(PAGE_QUEUE)
        self._sending = False
        self._writer = asyncio.create_task(self._write())

    def listen(self, path: str, value: list[Any] | None) -> None:
        """Follow ``path`` (at most :data:`PAGE_LISTENS` paths: more closes the client)."""
        if path not in self.listening and len(self.listening) >= PAGE_LISTENS:
            self.close(f"it listened to more than {PAGE_LISTENS} paths")
            return
        self.listening[path] = value

    def send(self, data: str | bytes) -> None:
        """Queue a value or a path change for the client; one whose queue is full is closed."""
        if self.closed:
            return
        try:
            self._queue.put_nowait(data)
        except asyncio.QueueFull:
            self.close(f"{PAGE_QUEUE} messages waited for it to read")

    def send_meters(self, text: str) -> None:
        """Queue meters, unless the client has something left to read: then they are dropped."""
        if self.closed:
            return
        if self._sending or not self._queue.empty():
            self.dropped += 1
            return
        self._queue.put_nowait(text)

    def close(self, why: str | None = None) -> None:
        """End the connection at once, without the closing handshake a client that does not
        read would never answer; ``why``: logged (one line)."""
        if self.closed:
            return
        self.closed = True
        if why is not None:
            log.warning("OSCQuery closed the WebSocket of %s: %s", self.peer, why)
        self._writer.cancel()
        if self._transport is not None:
            self._transport.abort()

    async def _write(self) -> None:
        """Send what the queue holds, in order; a send that takes too long closes the client."""
        while True:
            data = await self._queue.get()
            self._sending = True
            send = (
                self.socket.send_str(data)
                if isinstance(data, str)
                else self.socket.send_bytes(data)
            )
            try:
                await asyncio.wait_for(send, PAGE_SEND_SECONDS)
            except asyncio.TimeoutError:
                self.close(f"a message waited {PAGE_SEND_SECONDS:g} s to be read")
                return
            except (ConnectionError, RuntimeError):  # it went away, or is closing
                self.close()
                return
            finally:
                self._sending = False

    async def ended(self) -> None:
        """Wait for the sending task to end once the client is closed."""
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer
