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


def max_addresses(patcher: dict) -> set[str]:
    """What [prepend /address] objects and message boxes starting with '/' send."""
    found = set()
    for box in max_boxes(patcher):
        words = box.get("text", "").split()
        if box["maxclass"] == "newobj" and words[:1] == ["prepend"] and words[1].startswith("/"):
            found.add(words[1])
        elif box["maxclass"] == "message" and words and words[0].startswith("/"):
            found.add(words[0])
    return found


def in_address_space(address: str) -> bool:
    for entry in ADDRESSES:
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


def test_patches_use_the_server_default_ports(pd_text, max_patch):
    options = ServeOptions()
    assert f"connect localhost {options.osc_port}" in pd_text
    assert f"netreceive -u -b {options.reply_port}" in pd_text
    texts = [box.get("text", "") for box in max_boxes(max_patch)]
    assert f"udpsend 127.0.0.1 {options.osc_port}" in texts
    assert f"udpreceive {options.reply_port}" in texts


def test_pd_patch_wiring_refers_to_existing_boxes(pd_text):
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


def run_pd(server, reply_port, tmp_path, pd_text, moves=""):
    """Run the Pd patch headless against ``server`` for 1.5 s (``moves``: messages to its
    receivers, as Pd's -send takes them); returns Pd's console."""
    patch = tmp_path / "bendserver.pd"
    patch.write_text(
        pd_text.replace("connect localhost 9000", f"connect localhost {server.osc.port}").replace(
            "netreceive -u -b 9001", f"netreceive -u -b {reply_port}"
        ),
        encoding="utf-8",
    )
    options = ["-send", moves] if moves else []
    pd = subprocess.Popen(
        ["pd", "-nogui", "-noaudio", "-nomidi", *options, str(patch)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        time.sleep(1.5)  # the patch polls /stats every 500 ms
    finally:
        pd.terminate()
        console = pd.communicate(timeout=10)[0]
    return console


def test_opening_the_pd_patch_changes_nothing(tmp_path, pd_text):
    need("pd")
    reply_port = free_port()
    server = Server(
        ServeOptions(audio="null", osc_port=0, reply_port=reply_port), engine=bendable_engine()
    )
    with server:
        server.engine.enable_op("noise", False)  # a setting the performer made before
        time.sleep(0.1)
        before = server.engine.applied_state
        console = run_pd(server, reply_port, tmp_path, pd_text)
        assert server.engine.applied_state == before == server.engine.state, console
    assert server.osc.counters()["received"] >= 1, "the patch did talk to the server"


def test_opening_the_max_patch_sends_nothing_that_changes_state(max_patch):
    boxes = {b["box"]["id"]: b["box"] for b in max_patch["patcher"]["boxes"]}
    lines = [line["patchline"] for line in max_patch["patcher"]["lines"]]
    queries = ("/get", "/list", "/stats", "/ping")
    reached, todo = set(), [i for i, b in boxes.items() if b.get("text", "") == "loadbang"]
    assert todo, "the patch has a loadbang"
    while todo:
        source = todo.pop()
        for line in lines:
            sink = line["destination"][0]
            if line["source"][0] != source or sink in reached:
                continue
            reached.add(sink)
            words = boxes[sink].get("text", "").split()
            if boxes[sink]["maxclass"] == "message" and words[:1] == ["set"]:
                continue  # "set": shown, not sent on
            address = next((w for w in words if w.startswith("/")), None)
            if address is not None:
                assert address.startswith(queries), f"{sink} sends {address} on load"
            todo.append(sink)


def test_pure_data_runs_the_patch_and_changes_the_server(tmp_path, pd_text):
    need("pd")
    reply_port = free_port()
    server = Server(
        ServeOptions(audio="null", osc_port=0, reply_port=reply_port), engine=bendable_engine()
    )
    received = []
    dispatch = server.controller.dispatch

    def recording(address, args=(), at=None):
        received.append(address)
        return dispatch(address, args, at)

    server.controller.dispatch = recording
    moves = (
        "bs-mask-prob 0.25; bs-lfo-depth 1.5; bs-noise-enable 0; bs-gain 0.5; bs-interp 0.3; "
        "bs-version symbol default; bs-ping bang; bs-get bang"
    )
    with server:
        console = run_pd(server, reply_port, tmp_path, pd_text, moves)
        engine = server.engine
        assert engine.ops["mask"].get("prob") == pytest.approx(0.25)
        assert engine.ops["lfo"].get("depth") == pytest.approx(1.5)
        assert engine.ops["noise"].enabled is False
        assert engine.gain == pytest.approx(0.5)
        assert engine.applied_state.version == "default"
    assert "/interp" in received and received.count("/stats") >= 2, received
    assert "bendserver: pong" in console, console
    assert "bendserver-get: bend mask prob" in console, console
    assert server.osc.worker.errors == 0, console
