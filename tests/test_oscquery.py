"""OSCQuery on the live server: the shipped drive model on the null backend, queried over real
HTTP (urllib) and a real WebSocket client (websockets, not the server's library) on loopback,
and changed over real OSC: the namespace is the address table over the live ops, values follow
OSC messages, ops added or removed change the tree, and LISTEN pushes changes."""

import json
import logging
import math
import re
import socket
import time
import urllib.error
import urllib.request

import pytest
from jack import Replies, free_port, send_python
from pythonosc.osc_message import OscMessage
from streaming import Identity
from websockets.sync.client import connect

import bendserver as tb
from bendserver.control import route
from bendserver.serve import OSCQUERY_OFFSET, ServeOptions, Server


@pytest.fixture(scope="module")
def replies():
    listener = Replies()
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def server(replies):
    options = ServeOptions(
        model="drive", preset="drive", audio="null", osc_port=0, reply_port=replies.port
    )
    with Server(options) as running:
        yield running


def get(server, path, query=""):
    """(status, JSON or text) of one HTTP GET on the OSCQuery port."""
    url = f"{server.oscquery.url}{path}" + (f"?{query}" if query else "")
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    return status, json.loads(body) if body else None


def wait_for(read, expected, timeout=5.0):
    """Poll ``read()`` until it returns ``expected``; returns the last value read."""
    deadline = time.monotonic() + timeout
    value = read()
    while value != expected and time.monotonic() < deadline:
        time.sleep(0.02)
        value = read()
    return value


def methods(node):
    """The FULL_PATH of every method (a node with ACCESS or TYPE but no CONTENTS) under node."""
    children = node.get("CONTENTS", {})
    found = [] if children else [node["FULL_PATH"]]
    for child in children.values():
        found += methods(child)
    return found


def test_the_root_is_the_address_table_over_the_live_ops(server):
    status, root = get(server, "/")
    assert status == 200 and root["FULL_PATH"] == "/" and "drive" in root["DESCRIPTION"]
    assert set(root["CONTENTS"]) == {
        "bend",
        "interp",
        "version",
        "preset",
        "engine",
        "list",
        "stats",
        "ping",
        "midi",
        "model",
        "node",
        "mod",
        "record",
        "rack",
    }  # fmt: skip  (no attr: drive is no TorchScript file; /get: VALUE does its job)
    bend = root["CONTENTS"]["bend"]["CONTENTS"]
    assert set(bend) == {"mask", "lfo", "noise", "add", "remove", "clear"}
    assert bend["mask"]["DESCRIPTION"] == "op Mask on clip_in"
    live = server.controller.dispatch("/list", ["bends"])[0][1]
    ops = {f"/bend/{op_id}/enable" for op_id in ("mask", "lfo", "noise")}
    paths = methods(root)
    mods = {p for p in paths if p.startswith("/mod/lfo/")}  # the preset's LFO, a modulator
    assert {"/mod/lfo/rate", "/mod/lfo/route"} <= mods
    assert {p for p in paths if p.count("/") == 3} - mods == set(live) | ops | {"/node/drive/load"}
    for path in paths:  # every node is an address the server routes, to the entry it names
        assert route(path).entry.effect in root_node(root, path)["DESCRIPTION"]


def root_node(root, path):
    node = root
    for part in path.strip("/").split("/"):
        node = node["CONTENTS"][part]
    return node


def test_an_op_parameter_has_its_type_range_value_and_access(server):
    status, node = get(server, "/bend/mask/prob")
    assert status == 200
    assert node["FULL_PATH"] == "/bend/mask/prob" and node["TYPE"] == "f"
    assert node["RANGE"] == [{"MIN": tb.Mask.params["prob"].low, "MAX": 1.0}]
    assert node["VALUE"] == [pytest.approx(0.6)] and node["ACCESS"] == 3
    assert node["DESCRIPTION"].startswith(tb.Mask.params["prob"].doc)
    _, noise = get(server, "/bend/noise/std")
    low, high = tb.Noise.params["std"].low, tb.Noise.params["std"].high
    assert noise["RANGE"] == [{k: v for k, v in (("MIN", low), ("MAX", high)) if math.isfinite(v)}]
    assert get(server, "/bend/mask/prob", "TYPE") == (200, {"TYPE": "f"})
    assert get(server, "/bend/mask/enable")[1]["TYPE"] == "i"
    _, version = get(server, "/version")
    assert version["RANGE"] == [{"VALS": server.engine.versions}]
    assert version["VALUE"] == ["default"] and version["ACCESS"] == 3
    _, load = get(server, "/preset/load")
    assert "drive" in load["RANGE"][0]["VALS"] and load["ACCESS"] == 2 and "VALUE" not in load
    assert get(server, "/engine/gain", "RANGE")[1] == {"RANGE": [{"MIN": 0.0, "MAX": 16.0}]}


def test_queries_answer_as_the_proposal_says(server):
    assert get(server, "/engine/reset", "VALUE") == (204, None)  # no value to read
    status, text = get(server, "/bend/nothing/here")
    assert status == 404 and "GET / for the namespace" in text
    status, text = get(server, "/engine/gain", "LOUDNESS")
    assert status == 400 and "unknown attribute LOUDNESS" in text
    assert get(server, "/engine", "ACCESS") == (200, {"ACCESS": 0})
    assert set(get(server, "/engine", "CONTENTS")[1]["CONTENTS"]) == {
        "gain", "mix", "bypass", "reset",
    }  # fmt: skip


def test_host_info_names_the_osc_port_that_answers(server, replies):
    status, info = get(server, "/", "HOST_INFO")
    assert status == 200 and info["NAME"] == "bendserver drive"
    assert info["OSC_IP"] == "127.0.0.1" and info["OSC_TRANSPORT"] == "UDP"
    assert info["OSC_PORT"] == server.osc.port
    assert info["EXTENSIONS"]["LISTEN"] and info["EXTENSIONS"]["VALUE"]
    send_python(info["OSC_PORT"], "/ping")
    assert replies.wait_for("/pong") == []


def test_value_follows_osc_messages(server):
    def value(path):
        return get(server, path, "VALUE")[1]["VALUE"]

    send_python(server.osc.port, "/bend/mask/prob", 0.25)
    assert wait_for(lambda: value("/bend/mask/prob"), [0.25]) == [0.25]
    send_python(server.osc.port, "/engine/bypass", 1.0)  # as Pd sends it: a float
    assert wait_for(lambda: value("/engine/bypass"), [1]) == [1]
    send_python(server.osc.port, "/engine/bypass", 0.0)
    assert wait_for(lambda: value("/engine/bypass"), [0]) == [0]
    assert get(server, "/engine/bypass")[1]["VALUE"] == [0]


def test_the_tree_follows_ops_added_and_removed(server):
    assert get(server, "/bend/boost")[0] == 404
    send_python(server.osc.port, "/bend/add", "boost", "Scale", "drive_out", "value", 2.0)
    status = wait_for(lambda: get(server, "/bend/boost")[0], 200)
    assert status == 200
    boost = get(server, "/bend/boost")[1]
    assert set(boost["CONTENTS"]) == {"value", "enable"}
    assert boost["CONTENTS"]["value"]["VALUE"] == [2.0]
    scale = tb.Scale.params["value"]
    assert boost["CONTENTS"]["value"]["RANGE"] == [{"MIN": scale.low, "MAX": scale.high}]
    assert "boost" in get(server, "/bend/remove", "RANGE")[1]["RANGE"][0]["VALS"]
    send_python(server.osc.port, "/bend/remove", "boost")
    assert wait_for(lambda: get(server, "/bend/boost")[0], 404) == 404
    assert "boost" not in get(server, "/bend", "CONTENTS")[1]["CONTENTS"]


def receive(client, timeout=3.0):
    """The next WebSocket message: an OSC message as (address, args), or a JSON command."""
    data = client.recv(timeout=timeout)
    if isinstance(data, bytes):
        message = OscMessage(data)
        return message.address, list(message.params)
    return json.loads(data)


def test_listen_pushes_value_changes_as_osc_and_path_changes_as_json(server):
    ws_url = server.oscquery.url.replace("http", "ws") + "/"
    with connect(ws_url) as client:
        client.send(json.dumps({"COMMAND": "LISTEN", "DATA": "/engine/gain"}))
        client.send(json.dumps({"COMMAND": "LISTEN", "DATA": "/bend/lfo/depth"}))
        time.sleep(0.1)
        send_python(server.osc.port, "/engine/gain", 0.5)
        assert receive(client) == ("/engine/gain", [0.5])
        send_python(server.osc.port, "/bend/lfo/depth", 0.25)
        assert receive(client) == ("/bend/lfo/depth", [0.25])

        send_python(server.osc.port, "/bend/add", "tilt", "Bias", "clip_in")
        added = receive(client)
        assert added["COMMAND"] == "PATH_ADDED" and added["DATA"]["FULL_PATH"] == "/bend/tilt"
        assert set(added["DATA"]["CONTENTS"]) == {"value", "enable"}
        send_python(server.osc.port, "/bend/remove", "tilt")
        assert receive(client) == {"COMMAND": "PATH_REMOVED", "DATA": "/bend/tilt"}

        client.send(json.dumps({"COMMAND": "IGNORE", "DATA": "/engine/gain"}))
        time.sleep(0.1)
        send_python(server.osc.port, "/engine/gain", 0.75)
        send_python(server.osc.port, "/bend/lfo/depth", 0.5)
        assert receive(client) == ("/bend/lfo/depth", [0.5]), "gain is ignored now"
        with pytest.raises(TimeoutError):
            receive(client, timeout=0.3)
        assert get(server, "/engine/gain", "VALUE")[1] == {"VALUE": [0.75]}


# -- ports, the banner and zeroconf (a small model: nothing to load) ---------------------------


def identity_server(**options):
    return Server(
        ServeOptions(audio="null", reply_port=free_port(), **options),
        engine=tb.StreamEngine(Identity()),
    )


def test_ports_default_to_the_osc_port_plus_10_and_0_turns_oscquery_off():
    port = free_port()
    with socket.socket() as probe:  # the TCP port that the default would be: free?
        if probe.connect_ex(("127.0.0.1", port + OSCQUERY_OFFSET)) == 0:
            pytest.skip("the port after the free one is taken")
    server = identity_server(osc_port=port)
    try:
        assert server.oscquery.port == port + OSCQUERY_OFFSET
        assert f"oscquery   http://127.0.0.1:{port + OSCQUERY_OFFSET}" in server.banner()
    finally:
        server.stop()
    server = identity_server(osc_port=0, oscquery_port=0)
    try:
        assert server.oscquery is None and "oscquery   off" in server.banner()
    finally:
        server.stop()
    server = identity_server(osc_port=0, zeroconf=False)
    try:
        server.start()
        assert server.oscquery.port != 0 and "(not advertised)" in server.banner()
        assert get(server, "/engine/gain", "VALUE")[1] == {"VALUE": [1.0]}
        time.sleep(0.3)
        assert server.oscquery.advertised is False
    finally:
        server.stop()


def test_a_taken_port_is_refused_when_given_and_replaced_when_default():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        busy = taken.getsockname()[1]
        with pytest.raises(tb.BendingError, match="pick another with --oscquery-port"):
            identity_server(osc_port=0, oscquery_port=busy)
        server = identity_server(osc_port=busy - OSCQUERY_OFFSET)  # its default is taken
        try:
            server.start()
            assert server.oscquery.port not in (0, busy)
            assert get(server, "/", "HOST_INFO")[1]["OSC_PORT"] == server.osc.port
        finally:
            server.stop()


def test_zeroconf_advertises_the_service_or_says_once_why_not(caplog):
    """Where OSC listens on a network of the machine (its first address that is not loopback:
    a server on loopback advertises nothing, test_hostile_page)."""
    from zeroconf import Zeroconf

    from bendserver.osc.oscquery import _local_addresses

    address = next((a for a in _local_addresses() if not a.startswith("127.")), None)
    if address is None:
        pytest.skip("this machine has no network address beside loopback")
    caplog.set_level(logging.WARNING, "bendserver.oscquery")
    server = identity_server(osc_port=0, osc_host=address, allow=[address])
    try:
        server.start()
        assert wait_for(lambda: server.oscquery.advertised is not None, True, 10) is True
        if server.oscquery.advertised:
            browser = Zeroconf(interfaces=[address])
            try:
                name = f"bendserver-Identity-{server.osc.port}._oscjson._tcp.local."
                info = browser.get_service_info("_oscjson._tcp.local.", name, timeout=3000)
            finally:
                browser.close()
            assert info is not None and info.port == server.oscquery.port
            assert info.parsed_addresses() == [address]
        else:
            warnings = [r for r in caplog.records if "not advertised" in r.getMessage()]
            assert len(warnings) == 1 and server.oscquery.url in warnings[0].getMessage()
        assert get(server, "/ping")[0] == 200, "served either way"
    finally:
        server.stop()


def test_an_nn_tilde_file_has_its_attributes_as_nodes(tmp_path):
    pytest.importorskip("cached_conv", reason="cached-conv is installed by make install")
    from test_torchscript import nn_tilde_file

    from bendserver.control import Controller
    from bendserver.osc.namespace import Namespace

    engine = tb.StreamEngine(nn_tilde_file(tmp_path), block=256, fuse=False)
    controller = Controller(engine)
    namespace = Namespace(controller)
    level = namespace.node("/attr/level")
    assert level["TYPE"] == "f" and level["VALUE"] == [1.0] and level["ACCESS"] == 3
    controller.dispatch("/attr/level", [0.5])
    assert namespace.node("/attr/level")["VALUE"] == [0.5]
    assert namespace.node("/attr/volume") is None
    assert set(namespace.tree()["CONTENTS"]["attr"]["CONTENTS"]) == {"level"}


def test_the_cli_prints_where_oscquery_answers_and_0_turns_it_off():
    from test_serve import start_cli

    process, banner = start_cli("--audio", "null", "--osc-port", "0", "-p", "none")
    try:
        line = next(line for line in banner if line.startswith("oscquery"))
        url = line.split()[1]
        osc_port = int(re.search(r"listening on [\d.]+:(\d+)", "\n".join(banner))[1])
        with urllib.request.urlopen(f"{url}/?HOST_INFO", timeout=5) as response:
            assert json.loads(response.read())["OSC_PORT"] == osc_port
    finally:
        process.terminate()
        process.communicate(timeout=20)
    process, banner = start_cli("--audio", "null", "--osc-port", "0", "--oscquery-port", "0")
    process.terminate()
    process.communicate(timeout=20)
    assert any(line.startswith("oscquery   off") for line in banner)
