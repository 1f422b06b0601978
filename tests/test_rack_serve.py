"""A rack served live: one block loop, per-node OSC with the real client (a node's change heard,
/get per node, /list nodes), the banner's nodes and latency, and the CLI's -m/--rack serve."""

import json
import socket
import time
import urllib.request

import numpy as np
import pytest
import soundfile as sf
from jack import oscsend, send_python
from pythonosc.osc_bundle_builder import OscBundleBuilder
from pythonosc.osc_message_builder import build_msg
from streaming import Identity

import bendserver as tb
from bendserver.cli import main
from bendserver.control import Controller
from bendserver.engine.node import Node
from bendserver.engine.rack import Rack
from bendserver.errors import BendingError
from bendserver.measure.bench import bench_rack
from bendserver.presets.library import PresetLibrary
from bendserver.rackspec import RackSpec
from bendserver.schedule import SCHEDULE_CAPACITY
from bendserver.serve import ServeOptions, Server
from bendserver.slices import sliced

BLOCK = 64
LEVEL = 0.4


def _scaled(name: str) -> Node:
    node = Node(Identity(), block=BLOCK)
    node.add_op("g", tb.Scale(value=1.0), "gain")
    return node


def test_a_served_racks_node_change_is_heard_and_read_back_per_node(tmp_path, replies):
    rack = Rack({"a": _scaled("a"), "b": _scaled("b")}, fuse=False)
    source, record = tmp_path / "dc.wav", tmp_path / "out.wav"
    sf.write(str(source), np.full(rack.sample_rate // 4, LEVEL, np.float32), rack.sample_rate)
    options = ServeOptions(
        audio="null", osc_port=0, reply_port=replies.port, input=str(source),
        record=str(record), oscquery_port=0,
    )  # fmt: skip
    with Server(options, engine=rack) as server:
        assert (
            "rack       2 nodes" in server.banner() and "node       /b: Identity" in server.banner()
        )
        oscsend(server.osc.port, "/list", "s", "nodes")
        assert replies.wait_for("/list/nodes") == ["a", "b"]
        time.sleep(0.2)
        oscsend(server.osc.port, "/b/bend/g/value", "f", 0.5)
        deadline = time.monotonic() + 5
        while rack.nodes["b"].applied_state.op("g").params[0][1] != 0.5:
            assert time.monotonic() < deadline, "the node's change never applied"
            time.sleep(0.01)
        time.sleep(0.2)
        # each node's reply under its address, whichever form asked (liblo, python-osc)
        oscsend(server.osc.port, "/b/get/bend/g/value")
        send_python(server.osc.port, "/a/get/bend/g/value")
        assert dict(replies.receive()) == {
            "/b/get/bend/g/value": [0.5],
            "/a/get/bend/g/value": [1.0],
        }
        oscsend(server.osc.port, "/get/a/bend/g/value")  # the node's address after /get
        send_python(server.osc.port, "/get/b/bend/g/value")
        assert dict(replies.receive()) == {
            "/a/get/bend/g/value": [1.0],
            "/b/get/bend/g/value": [0.5],
        }
        oscsend(server.osc.port, "/get/bend/g/value")  # no node named: says how to ask one
        assert replies.wait_for("/error") == [
            "/get/bend/g/value",
            "this rack plays several nodes (a, b): ask one of them, /get/<node>/bend/g/value "
            "(/get/a/bend/g/value for instance)",
        ]
        oscsend(server.osc.port, "/bend/g/value", "f", 0.1)  # no node named: refused
        assert "a, b" in replies.wait_for("/error")[-1]
        oscsend(server.osc.port, "/b/preset/save", "s", "rack_b")  # a node's own preset
        assert replies.wait_for("/b/preset/saved") == ["rack_b"]
        oscsend(server.osc.port, "/stats")
        stats = replies.wait_for("/stats")
        assert stats[stats.index("latency") + 1] == server.latency
        oscsend(server.osc.port, "/b/stats")
        own = replies.wait_for("/b/stats")
    rack_ms = {key: stats[stats.index(key) + 1] for key in ("p50_ms", "a_p50_ms", "b_max_ms")}
    assert 0 < rack_ms["a_p50_ms"] < rack_ms["p50_ms"] and rack_ms["b_max_ms"] > 0
    own = dict(zip(own[::2], own[1::2], strict=True))  # b: its op added, its value set
    assert own["blocks"] > 0 and own["commands"] == 2 and 0 < own["p50_ms"] < rack_ms["p50_ms"]
    out = sf.read(str(record), dtype="float32")[0]  # 16-bit: within 1e-4
    # the dry level through both nodes, then node b's half of it (what the rack computes)
    assert np.isclose(out[0], LEVEL, atol=1e-4), "the rack does not play its input"
    assert np.isclose(out[-1], LEVEL / 2, atol=1e-4), "node b's change is not heard"
    heard = np.isclose(out, LEVEL, atol=1e-4) | np.isclose(out, LEVEL / 2, atol=1e-4)
    assert heard.all(), "the rack played something else than its nodes compute"


def test_cli_serves_the_shipped_rack_naming_its_nodes_and_latency(capsys):
    code = main(
        ["serve", "--rack", "racks/wavae_drive.toml", "--audio", "null", "--osc-port", "0",
         "--oscquery-port", "0", "--duration", "0.5"]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0
    assert "rack       " in printed and "node       /" in printed
    assert "the rack's" in printed and "stopped: blocks" in printed


def test_oscquery_shows_the_racks_tree_of_nodes(replies):
    rack = Rack({"a": _scaled("a"), "b": _scaled("b")}, fuse=False)
    rack.nodes["b"].set_param("g", "value", 0.5)
    options = ServeOptions(audio="null", osc_port=0, reply_port=replies.port, zeroconf=False)
    with Server(options, engine=rack) as server:
        time.sleep(0.1)  # the change above applies at the next block
        root = json.loads(urllib.request.urlopen(server.oscquery.url, timeout=5).read())
        url = f"{server.oscquery.url}/b/bend/g/value"
        param = json.loads(urllib.request.urlopen(url, timeout=5).read())
        load = json.loads(urllib.request.urlopen(f"{server.oscquery.url}/node/b/load").read())
        methods = server.oscquery.namespace.methods()
    words = {"a", "b", "preset", "stats", "node", "list", "ping", "midi", "mod", "record", "rack"}
    assert words == set(root["CONTENTS"])
    assert sorted(root["CONTENTS"]["node"]["CONTENTS"]) == ["a", "b"]
    assert param["FULL_PATH"] == "/b/bend/g/value" and param["VALUE"] == [0.5]
    assert load["FULL_PATH"] == "/node/b/load" and load["TYPE"] == "s"
    assert "/a/engine/gain" in methods and "/preset/load" in methods
    assert "/engine/gain" not in methods and "/bend/g/value" not in methods, "a node's, unnamed"


def test_a_racks_preset_saves_every_node_and_loads_each_part(replies):
    rack = Rack({"a": _scaled("a"), "b": _scaled("b")}, fuse=False)
    options = ServeOptions(audio="null", osc_port=0, reply_port=replies.port, oscquery_port=0)
    with Server(options, engine=rack) as server:
        port = server.osc.port
        oscsend(port, "/b/bend/g/value", "f", 0.5)
        oscsend(port, "/preset/save", "s", "whole_rack")
        assert replies.wait_for("/preset/saved") == ["whole_rack"]
        saved = json.loads(server.controller.presets.path("whole_rack").read_text())
        assert sorted(saved["nodes"]) == ["a", "b"]
        assert saved["nodes"]["b"]["ops"] != saved["nodes"]["a"]["ops"]  # b's value 0.5
        oscsend(port, "/b/bend/g/value", "f", 0.9)
        oscsend(port, "/preset/load", "s", "whole_rack")
        oscsend(port, "/b/get/bend/g/value")  # after the load: queries wait for changes
        deadline = time.monotonic() + 5
        while rack.nodes["b"].applied_state.op("g").params[0][1] != 0.5:
            assert time.monotonic() < deadline, "the rack's preset did not load node b's part"
            time.sleep(0.01)
        oscsend(port, "/b/preset/save", "s", "node_b")  # one node's: the rack refuses it
        assert replies.wait_for("/b/preset/saved") == ["node_b"]
        oscsend(port, "/preset/load", "s", "node_b")
        assert "send it to one node (/a/preset/load node_b)" in replies.wait_for("/error")[-1]


def test_a_racks_preset_loads_whole_at_one_block_or_not_at_all(tmp_path):
    """Both nodes' parts of a rack preset apply at the same block, though blocks run while it
    is prepared (here: a block each time the preparation lets the audio in); a preset with a
    part that does not fit changes no node."""
    rack = Rack({"a": _scaled("a"), "b": _scaled("b")}, fuse=False)
    controller = Controller(rack, PresetLibrary(tmp_path))
    dc = np.full((1, BLOCK), LEVEL, np.float32)
    controller.dispatch("/a/bend/g/value", [0.5])
    controller.dispatch("/b/bend/g/value", [0.5])
    rack.process(dc)
    controller.dispatch("/preset/save", ["quarter"])
    saved = json.loads((tmp_path / "quarter.json").read_text())
    saved["nodes"]["b"]["bends"][0]["keys"] = ["no_such_activation"]
    (tmp_path / "broken.json").write_text(json.dumps(saved))
    controller.dispatch("/a/bend/g/value", [1.0])
    controller.dispatch("/b/bend/g/value", [1.0])
    levels = [float(rack.process(dc)[0, -1])]
    with sliced(lambda: levels.append(float(rack.process(dc)[0, -1])), every=0):
        with pytest.raises(BendingError, match="no_such_activation"):
            controller.dispatch("/preset/load", ["broken"])
        levels.append(float(rack.process(dc)[0, -1]))
        controller.dispatch("/preset/load", ["quarter"])
    levels += [float(rack.process(dc)[0, -1]) for _ in range(2)]
    changed = levels.index(next(v for v in levels if v != pytest.approx(LEVEL)))
    assert len(levels) > 4 and changed > 2, "blocks ran while the presets were prepared"
    assert levels[:changed] == pytest.approx([LEVEL] * changed), "the broken preset changed a node"
    assert levels[changed:] == pytest.approx([LEVEL / 4] * (len(levels) - changed)), levels


def test_bench_times_a_rack_against_its_models_one_after_the_other(capsys):
    spec = RackSpec.chain(["drive", "drive"])
    runs = bench_rack(spec, [256], calls=3)["256"]["runs"]
    assert list(runs) == [
        "models one after the other",
        "rack (drive (forward) -> drive_2 (forward))",
    ]
    assert all(run["p50_ms"] > 0 and run["max_ms"] >= run["p50_ms"] for run in runs.values())
    assert main(["bench", "-m", "drive", "-m", "drive", "--calls", "2", "--apply-sizes", "0"]) == 0
    assert "rack (drive (forward) -> drive_2 (forward))" in capsys.readouterr().out


def test_a_nodes_address_reaches_the_model_switched_in_under_its_name():
    engine = tb.StreamEngine(Identity(), block=BLOCK)
    controller = Controller(engine)
    controller.dispatch("/Identity/bend/add", ["g", "Scale", "gain"])
    incoming = Node(Identity(), block=BLOCK)  # what /model/load Identity swaps in
    engine.swap("Identity", incoming, 0.0)
    engine.process(np.zeros((1, BLOCK), np.float32))
    controller.dispatch("/Identity/bend/add", ["g", "Scale", "gain"])
    assert engine.node is incoming and "g" in incoming.state.op_ids


def test_a_nodes_timetagged_messages_wait_in_the_senders_schedule(replies):
    """A bundle timetagged ahead for a node's address waits in the sender's schedule (bounded
    like any address: one sender's hour-ahead flood is refused past the bound, changes for now
    still apply) and reaches the node at its time."""
    rack = Rack({"a": _scaled("a"), "b": _scaled("b")}, fuse=False)
    options = ServeOptions(audio="null", osc_port=0, reply_port=replies.port, oscquery_port=0)
    with Server(options, engine=rack) as server:
        port, schedule = server.osc.port, server.controller.schedule
        flood, sock = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
        with flood, sock:
            sock.bind(("127.0.0.2", 0))  # another sender: a schedule of its own
            for index in range(SCHEDULE_CAPACITY + 4):
                flood.sendto(ahead(3600 + index, "/a/bend/g/value", 0.9), ("127.0.0.1", port))
                if index % 10 == 9:
                    time.sleep(0.005)
            refused = [replies.wait_for("/error") for _ in range(4)]
            sock.sendto(ahead(0.6, "/b/bend/g/value", 0.25), ("127.0.0.1", port))
            time.sleep(0.2)
            held = len(schedule)
            waiting = rack.nodes["b"].applied_state.op("g").params[0][1]
            sock.sendto(build_msg("/a/bend/g/value", [0.5]).dgram, ("127.0.0.1", port))
            deadline = time.monotonic() + 5
            while rack.nodes["b"].applied_state.op("g").params[0][1] != 0.25:
                assert time.monotonic() < deadline, "the node's scheduled change never applied"
                time.sleep(0.01)
            now = rack.nodes["a"].applied_state.op("g").params[0][1]
    assert all("scheduled ahead already" in args[1] for args in refused), refused[:1]
    assert held == SCHEDULE_CAPACITY + 1 and waiting == 1.0 and now == 0.5


def ahead(seconds: float, address: str, *args: object) -> bytes:
    bundle = OscBundleBuilder(time.time() + seconds)
    bundle.add_content(build_msg(address, list(args)))
    return bundle.build().dgram


def test_a_racks_preset_given_to_a_command_gives_each_node_its_part(tmp_path, monkeypatch):
    """``-p`` with a rack's preset (render, serve, export: RackSpec.build) loads each node's
    part; a node's own address refuses it; one naming a node the rack lacks is refused."""
    rack = RackSpec.chain(["drive", "drive"]).build(block=256, preset="none")
    controller = Controller(rack)
    controller.dispatch("/drive_2/engine/gain", [0.5])
    rack.process(np.zeros((1, 256), np.float32))
    controller.dispatch("/preset/save", ["two_drives"])
    with pytest.raises(BendingError, match="is a rack's: load it into the rack"):
        controller.dispatch("/drive/preset/load", ["two_drives"])
    built = RackSpec.chain(["drive", "drive"]).build(block=256, preset="two_drives")
    assert built.nodes["drive_2"].state.gain == 0.5 and built.nodes["drive"].state.gain == 1.0
    assert built.nodes["drive"].state.ops == rack.nodes["drive"].state.ops == ()
    with pytest.raises(BendingError, match=r"sets nodes \['drive_2'\] this rack does not play"):
        RackSpec.chain(["drive", "wavae"]).build(block=256, preset="two_drives")
