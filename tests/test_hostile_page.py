"""The OSCQuery port and its page against hostile clients, with real sockets: a WebSocket client
that never reads (the others and the server's stop go on), requests too large or malformed for
HTTP (400, one log line, no traceback), and where zeroconf listens. The server is the shipped
drive model on the null backend."""

import base64
import contextlib
import json
import logging
import os
import socket
import time
from pathlib import Path

import pytest
from jack import Replies, demo_options
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from bendserver.osc import clients, oscquery
from bendserver.serve import Server


@pytest.fixture
def server():
    replies = Replies()
    running = Server(demo_options(replies.port))
    running.start()
    yield running
    running.stop()
    replies.close()


def own_socket(peer: tuple[str, int]) -> socket.socket:
    """This process's socket connected to ``peer`` (the server's end of a client's
    connection), found among its open files."""
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError, ValueError):
            found = socket.socket(fileno=os.dup(int(name)))
            with contextlib.suppress(OSError):
                if found.getpeername()[:2] == peer:
                    return found
            found.close()
    raise AssertionError(f"no socket connected to {peer}")


def stalled_client(url: str) -> socket.socket:
    """A WebSocket client (the handshake and one frame written by hand) asking for meters and
    never reading them: a small receive buffer, and the server's end of it a small send
    buffer, so that what the server sends backs up within seconds."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    with own_socket(sock.getsockname()[:2]) as end:
        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: "
        f"Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    assert sock.recv(4096).startswith(b"HTTP/1.1 101")
    text = json.dumps({"COMMAND": "METERS", "DATA": "on"}).encode()
    mask = os.urandom(4)
    masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(text))
    sock.sendall(bytes([0x81, 0x80 | len(text)]) + mask + masked)  # a masked text frame
    return sock


def meters_read(client, seconds: float) -> int:
    """How many meter snapshots ``client`` reads in ``seconds``."""
    count, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(TimeoutError):
            count += json.loads(client.recv(timeout=0.5))["COMMAND"] == "METERS"
    return count


def test_a_client_that_never_reads_holds_up_neither_the_others_nor_the_stop(
    server, monkeypatch, caplog
):
    """The finding: a client asking for meters and never reading blocked the push loop after
    ~100 s (2.8 MB queued): other pages stopped updating, and SIGTERM waited 8 s for it. Now
    each client has its own queue: the stalled one is closed once a message waited
    PAGE_SEND_SECONDS, the others get every meter snapshot, and the server stops at once."""
    monkeypatch.setattr(clients, "PAGE_SEND_SECONDS", 1.0)
    url = server.oscquery.url

    def closed():
        return [r.getMessage() for r in caplog.records if "closed the WebSocket" in r.getMessage()]

    with connect(url.replace("http", "ws") + "/") as reader:
        reader.send(json.dumps({"COMMAND": "METERS", "DATA": "on"}))
        assert meters_read(reader, 1.0) >= 5
        stalled = stalled_client(url)
        try:
            began, rates = time.monotonic(), []
            while not closed() and time.monotonic() - began < 60:
                rates.append(meters_read(reader, 1.0))
            rates.append(meters_read(reader, 1.0))  # and after it was closed
        finally:
            stopping = time.monotonic()
            server.stop()
            stopped = time.monotonic() - stopping
            stalled.close()
    assert closed() == [
        "OSCQuery closed the WebSocket of 127.0.0.1: a message waited 1 s to be read"
    ]
    assert min(rates) >= 10, f"snapshots a second while another client stalled: {rates}"
    assert stopped < 2.0, f"the server took {stopped:.1f} s to stop"


def raw_request(url: str, head: bytes) -> tuple[int, str]:
    """The status and body of one request sent as bytes (as no HTTP library would)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(head)
        data = b""
        with contextlib.suppress(ConnectionError, TimeoutError):
            while chunk := sock.recv(65536):
                data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")


HOST = "Host: 127.0.0.1\r\n"


def request(target: str = "/", headers: str = HOST) -> bytes:
    return f"GET {target} HTTP/1.1\r\n{headers}Connection: close\r\n\r\n".encode()


@pytest.mark.parametrize(
    "head, why",
    [
        (request(headers="Host: [\r\n"), "Host: ["),
        (request("/" + "a" * 20_000), "a 20 KB URL"),
        (request(headers=f"{HOST}X-Long: {'b' * 10_000}\r\n"), "a 10 KB header"),
        (request(headers=HOST + "".join(f"X-{i}: y\r\n" for i in range(300))), "300 headers"),
        (b"\x16\x03\x01 not http at all\r\n\r\n", "TLS bytes"),
    ],
)  # fmt: skip
def test_a_malformed_or_oversized_request_is_a_400_and_one_log_line(server, caplog, head, why):
    """The finding: ``Host: [`` gave 500 and a 22-line traceback per request; a long URL or
    header, or 300 headers, logged aiohttp's tracebacks."""
    caplog.set_level(logging.DEBUG)
    status, _ = raw_request(server.oscquery.url, head)
    time.sleep(0.1)
    assert status == 400, why
    assert not [r for r in caplog.records if r.exc_info], "no traceback"
    assert raw_request(server.oscquery.url, request())[0] == 200, "the next request is served"


def test_malformed_requests_are_named_in_the_log_a_bounded_number_of_times(server, caplog):
    for _ in range(70):
        assert raw_request(server.oscquery.url, request("/" + "a" * 9000))[0] == 400
    time.sleep(0.1)
    lines = [r.getMessage() for r in caplog.records if "malformed request" in r.getMessage()]
    assert len(lines) == 64 and lines[-1].endswith("; more are only counted")
    assert lines[0].startswith("OSCQuery answered a malformed request from 127.0.0.1 with 400")


# -- where zeroconf listens --------------------------------------------------------------------


def mdns_sockets() -> list[str]:
    """This process's UDP sockets bound to port 5353 (multicast DNS), as /proc lists them."""
    inodes = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{name}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table in ("udp", "udp6"):
        for line in Path(f"/proc/self/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1].endswith(":14E9") and fields[9] in inodes:
                found.append(fields[1])
    return found


def test_a_server_on_loopback_advertises_nothing(server):
    """The finding: a default serve (OSC on 127.0.0.1) advertised over zeroconf on
    0.0.0.0:5353."""
    time.sleep(3)  # registering takes ~2 s where it happens
    assert server.oscquery.advertised is False and mdns_sockets() == []
    assert "(not advertised: OSC listens on loopback only)" in server.banner()


def test_clients_and_the_paths_each_follows_are_bounded(server, monkeypatch, caplog):
    monkeypatch.setattr(oscquery, "PAGE_CLIENTS", 2)
    monkeypatch.setattr(clients, "PAGE_LISTENS", 3)
    url = server.oscquery.url.replace("http", "ws") + "/"
    with connect(url) as first, connect(url) as second:
        with pytest.raises(InvalidStatus) as refused:
            connect(url)
        assert refused.value.response.status_code == 503
        for path in ("/engine/gain", "/engine/mix", "/engine/bypass"):
            first.send(json.dumps({"COMMAND": "LISTEN", "DATA": path}))
        second.send(json.dumps({"COMMAND": "LISTEN", "DATA": "/engine/gain"}))
        first.send(json.dumps({"COMMAND": "LISTEN", "DATA": "/version"}))
        with pytest.raises(ConnectionClosed):
            while True:
                first.recv(timeout=5)
    assert any("it listened to more than 3 paths" in r.getMessage() for r in caplog.records)
