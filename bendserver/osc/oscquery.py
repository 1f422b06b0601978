"""OSCQuery for ``bendserver serve``: the namespace over HTTP, value changes over WebSocket.

Clients such as ossia-max/ossia-pd, Chataigne or an OSCQuery browser discover the address space
instead of typing it (the Vidvox OSCQuery proposal). aiohttp serves the JSON namespace
(:mod:`bendserver.osc.namespace`), ``?HOST_INFO``, ``?<ATTRIBUTE>`` queries and, on the same port,
the WebSocket where a client sends ``{"COMMAND": "LISTEN", "DATA": path}`` and receives each change
of that value as a binary OSC message, and ``PATH_ADDED``/``PATH_REMOVED`` when ops come and go.
A binary OSC message a client sends on the WebSocket is handled as one sent to the OSC port
(coalesced, applied between blocks by the control worker). ``/ui`` is the control page
(:mod:`bendserver.ui`), whose meters come over the same WebSocket (``{"COMMAND": "METERS"}``).
Every request comes from a host the OSC port would take, names this machine in ``Host`` and, from
a browser, comes from this server's own pages (``Origin``): see :mod:`bendserver.osc.access`.
It runs on an asyncio loop in a thread of its own, on the control side: it reads the engine's
pending state (never the audio's) and waits for the compute gate as the control worker does.
The service is advertised over zeroconf as ``_oscjson._tcp`` on the interfaces OSC listens on
(not at all for a server on loopback); where multicast does not work that fails soft (one
warning) and clients connect by address.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..audio.gate import ComputeGate
from ..control import Controller
from ..errors import BendingError
from ..limits import HTTP_MAX_HEADERS, HTTP_MAX_LINE, PAGE_CLIENTS
from ..threads import LoopThread
from ..ui import Meters, page_files
from .access import AccessList, foreign_host, foreign_origin, local_names, malformed_host
from .clients import Client
from .intake import MAX_DATAGRAM
from .namespace import Namespace, Node
from .replies import encode

if TYPE_CHECKING:
    import ifaddr
    from aiohttp import WSMsgType, web
    from aiohttp.http_exceptions import HttpProcessingError
    from zeroconf import InterfaceChoice, ServiceInfo
    from zeroconf.asyncio import AsyncZeroconf

log = logging.getLogger("bendserver.oscquery")

SERVICE_TYPE = "_oscjson._tcp.local."
#: Seconds between looks at the engine's state, for LISTEN values and path changes (only
#: while a client listens: an idle loop does not wake, as a thread taking the GIL 50 times a
#: second cost xruns in the one-minute soak test).
POLL = 0.02
#: The node attributes a ``?ATTRIBUTE`` query may ask for.
ATTRIBUTES = ("FULL_PATH", "CONTENTS", "TYPE", "VALUE", "RANGE", "ACCESS", "DESCRIPTION")
#: What ``?HOST_INFO`` says this server does, in the proposal's names.
EXTENSIONS = {
    "ACCESS": True,
    "VALUE": True,
    "RANGE": True,
    "DESCRIPTION": True,
    "TAGS": False,
    "EXTENDED_TYPE": False,
    "UNIT": False,
    "CRITICAL": False,
    "CLIPMODE": False,
    "LISTEN": True,
    "PATH_CHANGED": False,
    "PATH_RENAMED": False,
    "PATH_ADDED": True,
    "PATH_REMOVED": True,
    "HTML": False,
}
_WILDCARDS = ("", "0.0.0.0", "::")
#: Meter snapshots a second, to each client that asked for them.
METER_RATE = 15.0
#: Malformed requests named in the log, one line each; past them they are only counted.
MALFORMED_LOGGED = 64


class OscQueryService(LoopThread):
    """Serves the OSCQuery namespace of ``controller`` on ``host:port`` (0: a port the OS
    chooses), describing the OSC server on ``osc_port`` of the same host. The port is bound
    here, so a busy one is refused before anything starts. Clients connect from loopback or
    the networks of ``allow``; ``submit(datagram, host)`` handles the OSC they send on the
    WebSocket (None: ignored); ``meters`` feeds the page's meters."""

    def __init__(
        self,
        controller: Controller,
        host: str,
        port: int,
        osc_port: int,
        gate: ComputeGate | None = None,
        name: str = "bendserver",
        advertise: bool = True,
        allow: Iterable[str] = (),
        submit: Callable[[bytes, str], None] | None = None,
        meters: Meters | None = None,
    ) -> None:
        self.namespace = Namespace(controller)
        self._access, self._names = AccessList(allow), local_names()
        self._submit, self._meters = submit, meters
        self._page = page_files()
        self.host, self.osc_port, self.name = host, osc_port, name
        #: Whether the service is advertised: only where OSC listens, so never for a server on
        #: loopback (multicast DNS would answer every network of the machine).
        self.advertise = advertise and not _loopback(host)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._socket = socket.create_server((host, port), family=family)
        except OSError as error:
            raise BendingError(
                f"cannot serve OSCQuery on {host}:{port} ({error.strerror}): another program "
                "may use the port; pick another with --oscquery-port (0 turns OSCQuery off)"
            ) from None
        self.port: int = self._socket.getsockname()[1]
        #: Whether zeroconf advertises the service: None until known (registering takes ~2 s).
        self.advertised: bool | None = None if self.advertise else False
        self._admission = gate.admission() if gate is not None else None
        self._clients: list[Client] = []  #: the WebSocket clients, each with its own queue
        self._next_meters = 0.0
        self._seen: tuple | None = None  # the engine states last looked at
        self._paths: set[str] = set()  # the nodes of that state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._woken: asyncio.Event | None = None  #: set when a client listens, or to stop
        super().__init__("oscquery")

    @property
    def url(self) -> str:
        """Where clients query the namespace."""
        host = "127.0.0.1" if self.host in _WILDCARDS else self.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    @property
    def service_name(self) -> str:
        """The zeroconf instance name: one word (Max and Pd split messages at spaces), with the
        OSC port, so that two servers on one machine differ (``bendserver-drive-9000``)."""
        return f"{self.name}-{self.osc_port}".replace(" ", "-")

    def host_info(self) -> Node:
        """The ``?HOST_INFO`` reply: the OSC server's port and transport, and what is supported
        (no ``OSC_IP`` on a wildcard host: clients then use the host they queried)."""
        info: Node = {
            "NAME": self.name,
            "EXTENSIONS": EXTENSIONS,
            "OSC_PORT": self.osc_port,
            "OSC_TRANSPORT": "UDP",
        }
        if self.host not in _WILDCARDS:
            info["OSC_IP"] = self.host
        return info

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving (and advertising); close the port even if never started."""
        self._stop.set()
        if self._loop is not None and self._woken is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                self._loop.call_soon_threadsafe(self._woken.set)
        super().stop(timeout)
        self._socket.close()

    # -- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        _import_libraries()
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/ui", self._page_file)
        app.router.add_get("/ui/{name:.*}", self._page_file)
        app.router.add_get("/{path:.*}", self._handle)
        runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            logger=_OneLine(),
            max_line_size=HTTP_MAX_LINE,
            max_field_size=HTTP_MAX_LINE,
            max_headers=HTTP_MAX_HEADERS,
        )
        await runner.setup()
        await web.SockSite(runner, self._socket).start()
        advertising = asyncio.create_task(self._advertise()) if self.advertise else None
        self._loop, self._woken = asyncio.get_running_loop(), asyncio.Event()
        try:
            while not self._stop.is_set():
                if self._clients:
                    await asyncio.sleep(POLL)
                    self._push_changes()
                    self._push_meters()
                else:  # asleep until a client listens, or stop()
                    await self._woken.wait()
                    self._woken.clear()
        finally:
            for client in list(self._clients):  # at once: a client may never read a goodbye
                client.close()
                await client.ended()
            if advertising is not None:
                advertising.cancel()
                await asyncio.gather(advertising, return_exceptions=True)
            await runner.cleanup()

    def _wait_gate(self) -> None:
        """Keep out of the audio's way, as the control worker does (bendserver.audio.gate)."""
        if self._admission is not None:
            self._admission.wait(0.05)

    # -- HTTP --------------------------------------------------------------------------------

    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Refuse a request from a host not allowed, for another name, or from another site
        (403), or whose Host cannot be read (400)."""
        refusal = self._refusal(request)
        if refusal is not None:
            status, text = refusal
            log.debug("OSCQuery refused a request: %s", text)
            return web.Response(status=status, text=text)
        return await handler(request)

    _guard.__middleware_version__ = 1  # as aiohttp's web.middleware marks it (not imported yet)

    def _refusal(self, request: web.Request) -> tuple[int, str] | None:
        """The status and reason ``request`` is refused with (None: it is not)."""
        peer, host = request.remote or "", request.headers.get("Host")
        origin = request.headers.get("Origin")
        if not self._access.allows(peer):
            return 403, (
                f"{peer} may not connect: only loopback and the networks given to serve's "
                "--allow may"
            )
        if malformed_host(host):
            return 400, f"a Host header of {host!r:.100} names no host: open {self.url}/ui"
        if foreign_host(host, self._names):
            return 403, (
                f"{host!r} does not name this machine: open {self.url}/ui (or this machine's "
                "name or address)"
            )
        if foreign_origin(origin, host):
            return 403, f"a page from {origin:.200} may not use this server: open {self.url}/ui"
        return None

    async def _page_file(self, request: web.Request) -> web.Response:
        """The control page's files (``/ui``: the page itself)."""
        name = request.match_info.get("name") or "index.html"
        if name not in self._page:
            return web.Response(status=404, text=f"the control page has no {name}; open /ui")
        body, kind = self._page[name]
        return web.Response(body=body, content_type=kind, headers={"Cache-Control": "no-cache"})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._websocket(request)
        self._wait_gate()
        attribute = request.query_string.split("&")[0].split("=")[0].upper()
        if attribute == "HOST_INFO":
            return web.json_response(self.host_info())
        node = self.namespace.node(request.path)
        if node is None:
            return web.Response(
                status=404, text=f"no OSC address {request.path}; GET / for the namespace"
            )
        if not attribute:
            return web.json_response(node)
        if attribute not in ATTRIBUTES:
            return web.Response(
                status=400, text=f"unknown attribute {attribute}; one of {', '.join(ATTRIBUTES)}"
            )
        if attribute not in node:
            return web.Response(status=204)
        return web.json_response({attribute: node[attribute]})

    # -- WebSocket: LISTEN, IGNORE, path changes ---------------------------------------------

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if len(self._clients) >= PAGE_CLIENTS:
            return web.Response(status=503, text=f"{PAGE_CLIENTS} clients are connected already")
        socket = web.WebSocketResponse(max_msg_size=MAX_DATAGRAM)
        await socket.prepare(request)
        if not self._clients:  # nobody followed the paths until now
            self._seen, self._paths = None, _nodes(self.namespace.methods())
        client = Client(socket, request)
        self._clients.append(client)
        if self._woken is not None:
            self._woken.set()
        try:
            async for message in socket:
                if message.type == WSMsgType.TEXT:
                    self._command(client, message.data)
                elif message.type == WSMsgType.BINARY and self._submit is not None:
                    self._submit(message.data, request.remote or "")
        finally:
            client.close()
            self._clients.remove(client)
        return socket

    def _command(self, client: Client, text: str) -> None:
        try:
            command = json.loads(text)
            name, path = command["COMMAND"], str(command["DATA"])
        except (ValueError, KeyError, TypeError, RecursionError):
            log.debug("OSCQuery: ignored a WebSocket message %r", text[:200])
            return
        if name == "LISTEN":
            self._wait_gate()
            client.listen(path, self.namespace.value(path))
        elif name == "IGNORE":
            client.listening.pop(path, None)
        elif name == "METERS" and self._meters is not None:
            client.metered = path == "on"

    def _push_changes(self) -> None:
        """Queue for each client the values it listens to that changed, and the paths added or
        removed, once per change of the engine's pending state (paths) or of what plays
        (values: those of ``/get``)."""
        states = self.namespace.states()
        if (
            self._seen is not None
            and len(states) == len(self._seen)
            and all(a is b for a, b in zip(states, self._seen, strict=True))
        ):
            return
        self._seen = states
        self._wait_gate()
        paths = _nodes(self.namespace.methods())
        removed = [p for p in sorted(self._paths - paths) if _parent(p) in paths]
        added = [p for p in sorted(paths - self._paths) if _parent(p) in self._paths]
        self._paths = paths
        texts = [json.dumps({"COMMAND": "PATH_REMOVED", "DATA": p}) for p in removed]
        texts += [
            json.dumps({"COMMAND": "PATH_ADDED", "DATA": self.namespace.node(p)}) for p in added
        ]
        for client in list(self._clients):
            for text in texts:
                client.send(text)
            for path, last in client.listening.items():
                value = self.namespace.value(path)
                if value is not None and value != last:
                    client.listening[path] = value
                    client.send(encode(path, value))

    def _push_meters(self) -> None:
        """Queue the meters for the clients that asked, :data:`METER_RATE` times a second."""
        now = time.monotonic()
        metered = [client for client in self._clients if client.metered]
        if not metered or self._meters is None or now < self._next_meters:
            return
        self._next_meters = max(self._next_meters + 1 / METER_RATE, now)
        self._wait_gate()
        text = json.dumps({"COMMAND": "METERS", "DATA": self._meters.snapshot()})
        for client in metered:
            client.send_meters(text)

    # -- zeroconf ----------------------------------------------------------------------------

    async def _advertise(self) -> None:
        """Advertise ``_oscjson._tcp`` until cancelled; a failure is logged once and the
        service goes on unadvertised."""
        zeroconf: AsyncZeroconf | None = None
        wildcard = self.host in _WILDCARDS
        try:
            zeroconf = AsyncZeroconf(interfaces=InterfaceChoice.All if wildcard else [self.host])
            info = ServiceInfo(
                SERVICE_TYPE,
                f"{self.service_name}.{SERVICE_TYPE}",
                port=self.port,
                properties={"txtvers": "1"},
                server=f"{socket.gethostname()}.local.",
                parsed_addresses=_local_addresses() if wildcard else [self.host],
            )
            await (await zeroconf.async_register_service(info, allow_name_change=True))
            self.advertised = True
            await asyncio.Event().wait()  # until cancelled
        except Exception as error:  # no multicast here: serve unadvertised
            self.advertised = False
            log.warning(
                "OSCQuery is not advertised over zeroconf (%s); clients connect to %s by address",
                error or type(error).__name__,
                self.url,
            )
        finally:
            if zeroconf is not None:
                with contextlib.suppress(Exception):
                    await zeroconf.async_unregister_all_services()
                    await zeroconf.async_close()


def preload_libraries() -> threading.Thread:
    """Start importing the service's libraries (aiohttp, zeroconf, ifaddr: a fifth of torch's
    import) in a thread of their own while the model loads; a server joins it before its audio
    starts, as an import holds the interpreter for its whole length: imported once the stream
    played, they cost 12 xruns at every start in direct mode."""
    thread = threading.Thread(target=_import_libraries, name="oscquery-imports", daemon=True)
    thread.start()
    return thread


def _import_libraries() -> None:
    """aiohttp, zeroconf and ifaddr, as module globals (see :func:`preload_libraries`)."""
    global ifaddr, WSMsgType, web, HttpProcessingError, InterfaceChoice, ServiceInfo
    global AsyncZeroconf
    import ifaddr
    from aiohttp import WSMsgType, web
    from aiohttp.http_exceptions import HttpProcessingError
    from zeroconf import InterfaceChoice, ServiceInfo
    from zeroconf.asyncio import AsyncZeroconf


class _OneLine(logging.LoggerAdapter):
    """aiohttp's logger for the requests it cannot parse (a URL or header too long, too many
    headers, bytes that are no HTTP): one line each, no traceback, the first
    :data:`MALFORMED_LOGGED` only (any host may send them, before the access check); a failure
    of the service itself keeps its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.getLogger("bendserver.oscquery"), {})
        self.malformed = 0  #: requests answered 400 before the service saw them

    def log(self, level: int, message: object, *args: Any, **kwargs: Any) -> None:
        error = kwargs.get("exc_info")
        if not isinstance(error, HttpProcessingError):
            self.logger.log(level, message, *args, **kwargs)
            return
        self.malformed += 1
        if self.malformed <= MALFORMED_LOGGED:
            more = "; more are only counted" if self.malformed == MALFORMED_LOGGED else ""
            reason = " ".join(str(error.message or type(error).__name__).split())
            self.logger.log(
                min(level, logging.WARNING),  # bytes that are no HTTP: aiohttp's debug line
                "OSCQuery answered a malformed request from %s with %d: %.200s%s",
                args[0] if args else "?",
                error.code,
                reason,
                more,
            )


def _nodes(methods: dict[str, Any]) -> set[str]:
    """Every node path of these methods: the methods and the containers above them."""
    found = {"/"}
    for path in methods:
        parts = path.strip("/").split("/")
        found.update("/" + "/".join(parts[: depth + 1]) for depth in range(len(parts)))
    return found


def _loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _local_addresses() -> list[str]:
    """The IPv4 addresses of this machine's interfaces (a wildcard host is reached at each)."""
    return [ip.ip for adapter in ifaddr.get_adapters() for ip in adapter.ips if ip.is_IPv4]


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"
