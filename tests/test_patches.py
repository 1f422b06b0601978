"""The shipped patches: every address they send exists in the server's address space, their
wiring is sound, and Pure Data itself, running patches/bendserver.pd headless, changes a
running server."""

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from jack import free_port, need
from streaming import CausalStack

import bendserver as tb
from bendserver.bending.ops import OPS
from bendserver.control import ADDRESSES
from bendserver.paths import SHIPPED_PRESETS
from bendserver.serve import ServeOptions, Server

ROOT = Path(__file__).resolve().parent.parent
PD_PATCH = ROOT / "patches" / "bendserver.pd"
MAX_PATCH = ROOT / "patches" / "bendserver.maxpat"
PRESET = SHIPPED_PRESETS / "drive.json"
PRESET_PARAMS = {"/bend/mask/prob", "/bend/lfo/depth", "/bend/lfo/freq", "/bend/noise/std"}


# -- reading the patches -----------------------------------------------------------------------


def pd_records(text: str) -> list[list[str]]:
    """The records of a .pd file (``#X obj 10 10 name args``), split on unescaped ';'."""
    records = re.split(r"(?<!\\);", text)
    return [record.split() for record in records if record.strip()]


def pd_boxes(text: str) -> list[list[str]]:
    """Boxes in creation order (the indexes ``#X connect`` uses): ['obj', x, y, name, ...]."""
    kinds = {"obj", "msg", "text", "floatatom", "symbolatom", "listbox"}
    return [r[1:] for r in pd_records(text) if r[0] == "#X" and r[1] in kinds]


def pd_addresses(text: str) -> set[str]:
    """What the patch's [oscformat a b c] objects send: /a/b/c."""
    return {
        "/" + "/".join(arg for arg in box[4:] if not arg.startswith("-"))
        for box in pd_boxes(text)
        if box[0] == "obj" and box[3] == "oscformat"
    }


def max_boxes(patcher: dict) -> list[dict]:
    return [entry["box"] for entry in patcher["patcher"]["boxes"]]


def max_box_addresses(box: dict) -> set[str]:
    """What a [prepend /address] object or a message box ('/a 1, /b 2') sends."""
    words = box.get("text", "").split()
    if box["maxclass"] == "newobj" and words[:1] == ["prepend"] and words[1].startswith("/"):
        return {words[1]}
    if box["maxclass"] == "message":
        messages = [m.split() for m in re.split(r"[,;]", box.get("text", ""))]
        return {m[0] for m in messages if m and m[0].startswith("/")}
    return set()


def max_addresses(patcher: dict) -> set[str]:
    return set().union(*(max_box_addresses(box) for box in max_boxes(patcher)))


#: Max objects that output when the patch opens, and what marks a box restoring a value on load.
MAX_LOAD_OBJECTS = {"loadbang", "loadmess", "autopattr", "pattrstorage", "live.thisdevice"}
MAX_INITIAL_VALUE = re.compile(r'"parameter_initial_enable"\s*:\s*1')


def max_sent_on_load(patcher: dict) -> set[str]:
    """Every address a box reachable from something that fires on load may send (reachable
    through any wire: an over-estimate, never an under-estimate)."""
    boxes = {box["id"]: box for box in max_boxes(patcher)}
    wires: dict[str, list[str]] = {}
    for entry in patcher["patcher"]["lines"]:
        line = entry["patchline"]
        wires.setdefault(line["source"][0], []).append(line["destination"][0])
    firing = [
        box_id
        for box_id, box in boxes.items()
        if (box.get("text", "").split() or [""])[0] in MAX_LOAD_OBJECTS
        or MAX_INITIAL_VALUE.search(json.dumps(box))
    ]
    reached = set(firing)
    while firing:
        for sink in wires.get(firing.pop(), []):
            if sink not in reached:
                reached.add(sink)
                firing.append(sink)
    return set().union(*(max_box_addresses(boxes[box_id]) for box_id in reached))


def in_address_space(address: str) -> bool:
    for entry in ADDRESSES:
        if entry.pattern == "/<node>/<address>":  # the table's own addresses, under a node name
            continue
        pattern = re.escape(entry.pattern)
        pattern = pattern.replace(re.escape("<address>"), ".+")
        pattern = re.sub(re.escape("<") + r"\w+" + re.escape(">"), "[^/]+", pattern)
        if re.fullmatch(pattern, address):
            return True
    return False


@pytest.fixture(scope="module")
def pd_text():
    return PD_PATCH.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def max_patch():
    return json.loads(MAX_PATCH.read_text(encoding="utf-8"))


# -- what the patches send ---------------------------------------------------------------------


def test_every_address_the_patches_send_exists(pd_text, max_patch):
    ops = json.loads(PRESET.read_text(encoding="utf-8"))["ops"]
    for name, addresses in [("pd", pd_addresses(pd_text)), ("max", max_addresses(max_patch))]:
        assert addresses, f"{name}: no address found"
        for address in addresses:
            assert in_address_space(address), f"{name} sends {address}, not in ADDRESSES"
            parts = address.strip("/").split("/")
            if parts[0] == "bend" and len(parts) == 3:
                op_id, param = parts[1:]
                assert op_id in ops, f"{name}: op '{op_id}' is not in preset drive"
                op_class = OPS[ops[op_id]["op"]]
                assert param == "enable" or param in op_class.params, f"{name}: {address}"
            if parts[0] == "get":
                assert in_address_space("/" + "/".join(parts[1:])), f"{name}: {address}"
        needed = PRESET_PARAMS | {"/interp", "/version", "/preset/load", "/stats"}
        assert needed <= addresses, f"{name} lacks {sorted(needed - addresses)}"


def test_the_address_check_rejects_what_the_server_does_not_know():
    assert in_address_space("/bend/mask/prob") and in_address_space("/get/bend/mask/prob")
    assert not in_address_space("/bend/mask") and not in_address_space("/volume")


#: What asks the server and changes nothing: all a patch may send when it is opened.
QUERIES = ("/get/", "/list", "/stats", "/ping")


def test_opening_the_max_patch_sends_no_change(max_patch):
    sent = max_sent_on_load(max_patch)
    changes = sorted(address for address in sent if not address.startswith(QUERIES))
    assert not changes, f"the Max patch sends {changes} when it is opened"
    asked = {address for address in sent if address.startswith("/get/")}
    assert {"/get/bend/mask/enable", "/get/engine/gain"} <= asked, sent
    routed = {word for box in max_boxes(max_patch) for word in box.get("text", "").split()[1:]}
    assert asked <= routed, f"replies shown nowhere: {sorted(asked - routed)}"


def test_patches_use_the_server_default_ports(pd_text, max_patch):
    options = ServeOptions()
    assert f"connect localhost {options.osc_port}" in pd_text
    assert f"netreceive -u -b {options.reply_port}" in pd_text
    texts = [box.get("text", "") for box in max_boxes(max_patch)]
    assert f"udpsend 127.0.0.1 {options.osc_port}" in texts
    assert f"udpreceive {options.reply_port}" in texts


def test_pd_patch_wiring_refers_to_existing_boxes(pd_text):
    stray = [r for r in pd_records(pd_text) if r[0] not in ("#N", "#X", "#A")]
    assert not stray, f"an unescaped ';' (in a comment?) cut a record short: {stray}"
    boxes = pd_boxes(pd_text)
    connects = [r[2:] for r in pd_records(pd_text) if r[:2] == ["#X", "connect"]]
    assert len(connects) > 50
    for source, _outlet, sink, _inlet in connects:
        assert int(source) < len(boxes) and int(sink) < len(boxes)
        assert boxes[int(sink)][0] != "text" and boxes[int(source)][0] != "text"
    names = {box[3] for box in boxes if box[0] == "obj"}
    for vanilla in ("oscformat", "oscparse", "netsend", "netreceive", "route", "metro", "hsl"):
        assert vanilla in names


def test_maxpat_wiring_refers_to_existing_inlets_and_outlets(max_patch):
    boxes = {box["id"]: box for box in max_boxes(max_patch)}
    lines = [entry["patchline"] for entry in max_patch["patcher"]["lines"]]
    assert len(lines) > 40
    for line in lines:
        (source, outlet), (sink, inlet) = line["source"], line["destination"]
        assert outlet < boxes[source]["numoutlets"], line
        assert inlet < boxes[sink]["numinlets"], line


# -- Pure Data, for real -----------------------------------------------------------------------


def bendable_engine():
    """A small engine with the op ids of preset drive and a version named like drive's."""
    engine = tb.StreamEngine(CausalStack(), block=256)
    engine.add_op("mask", tb.Mask(prob=0.6, dim=1), "act")
    engine.add_op("lfo", tb.Oscillate(depth=0.8), "act")
    engine.add_op("noise", tb.Noise(std=0.15), r"first\.conv\.weight")
    weights = {k: v.clone() for k, v in engine.model.module.state_dict().items() if "conv" in k}
    engine.bended.create_version("default", weights)
    return engine


class RecordingServer(Server):
    """A server on the null backend and free ports that records every message it dispatches
    (``received``: address and arguments, in order)."""

    def __init__(self, engine: tb.StreamEngine) -> None:
        self.reply_port = free_port()
        super().__init__(
            ServeOptions(audio="null", osc_port=0, reply_port=self.reply_port), engine=engine
        )
        self.received: list[tuple[str, list]] = []
        dispatch = self.controller.dispatch

        def recording(address, args=(), at=None, client=None):
            self.received.append((address, list(args)))
            return dispatch(address, args, at, client)

        self.controller.dispatch = recording

    def addresses(self) -> list[str]:
        return [address for address, _ in self.received]


def pd_patch_for(server: RecordingServer, folder: Path, pd_text: str) -> Path:
    """The Pd patch, talking to ``server``'s ports instead of the defaults."""
    patch = folder / "bendserver.pd"
    patch.write_text(
        pd_text.replace("connect localhost 9000", f"connect localhost {server.osc.port}").replace(
            "netreceive -u -b 9001", f"netreceive -u -b {server.reply_port}"
        ),
        encoding="utf-8",
    )
    return patch


def run_pd(*arguments: str, seconds: float = 1.5) -> str:
    """Run Pure Data headless (real time, no audio) for ``seconds``; its console output."""
    need("pd")
    pd = subprocess.Popen(
        ["pd", "-nogui", "-noaudio", "-nomidi", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        time.sleep(seconds)
    finally:
        pd.terminate()
        console = pd.communicate(timeout=10)[0]
    return console


def test_pure_data_runs_the_patch_and_changes_the_server(tmp_path, pd_text):
    server = RecordingServer(bendable_engine())
    patch = pd_patch_for(server, tmp_path, pd_text)
    moves = (
        "bs-mask-prob 0.25; bs-lfo-depth 1.5; bs-noise-enable 0; bs-gain 0.5; bs-interp 0.3; "
        "bs-version symbol default; bs-ping bang; bs-get bang"
    )
    with server:
        console = run_pd("-send", moves, str(patch))  # the patch polls /stats every 500 ms
        state = server.engine.state
        assert state.op("mask").param("prob") == pytest.approx(0.25)
        assert state.op("lfo").param("depth") == pytest.approx(1.5)
        assert state.op("noise").enabled is False
        assert state.gain == pytest.approx(0.5)
        assert state.version == "default"
    received = server.addresses()
    assert "/interp" in received and received.count("/stats") >= 2, received
    assert "bendserver: pong" in console, console
    assert "bendserver-get: bend mask prob" in console, console
    assert server.osc.worker.errors == 0, console


def played_state(engine: tb.StreamEngine) -> None:
    """Move every setting the patch shows away from its default, as a performer would have."""
    engine.set_param("mask", "prob", 0.45)
    engine.set_param("lfo", "freq", 6.25e-5)
    engine.enable_op("noise", False)
    engine.set_gain(0.8)
    engine.set_mix(0.9)


def test_opening_the_pd_patch_changes_nothing_on_the_server(tmp_path, pd_text):
    server = RecordingServer(bendable_engine())
    played_state(server.engine)
    before = server.engine.state
    with server:
        console = run_pd(str(pd_patch_for(server, tmp_path, pd_text)))
        after = server.engine.state
    changes = [a for a in server.addresses() if not a.startswith(QUERIES)]
    assert not changes, f"the patch sent {changes} on load"
    assert after == before
    asked = set(server.addresses())
    assert {"/get/bend/mask/enable", "/get/engine/gain", "/get/version"} <= asked, asked
    assert server.osc.worker.errors == 0, console
    assert "error" not in console.lower(), f"Pure Data reported errors opening the patch: {console}"


def test_the_pd_patch_shows_the_server_values(tmp_path, pd_text):
    """Once loaded, each box shows the server's value: banged, it sends what it shows (a
    toggle flips, so it is banged twice)."""
    server = RecordingServer(bendable_engine())
    played_state(server.engine)
    before = server.engine.state
    values = ["mask-prob", "lfo-depth", "lfo-freq", "noise-std", "gain", "mix", "version"]
    toggles = ["mask-enable", "lfo-enable", "noise-enable", "bypass"]
    bangs = " \\; ".join(f"bs-{n} bang" for n in values + toggles + toggles)
    probe = tmp_path / "probe.pd"
    probe.write_text(
        "#N canvas 0 0 300 200 12;\n#X obj 10 10 loadbang;\n#X obj 10 40 delay 800;\n"
        f"#X msg 10 70 \\; {bangs};\n#X connect 0 0 1 0;\n#X connect 1 0 2 0;\n",
        encoding="utf-8",
    )
    with server:
        console = run_pd(str(pd_patch_for(server, tmp_path, pd_text)), str(probe), seconds=2.0)
    sent = dict(server.received)  # the last message to each address
    for op in before.ops:
        assert sent[f"/bend/{op.op_id}/enable"] == [float(op.enabled)], console
        for name, value in op.params:
            assert sent[f"/bend/{op.op_id}/{name}"][0] == pytest.approx(value, rel=0.02), name
    for name in ("gain", "mix", "bypass"):
        assert sent[f"/engine/{name}"][0] == pytest.approx(float(getattr(before, name)), rel=0.02)
    assert sent["/version"] == [before.version]
