"""nn~ files made by the nn-tilde package (tests/nn_files.py) play as nn~ plays them.

Attributes of every type nn~ has, set over OSC, by a score and by a preset, give what the file's
own setter gives (the page does the same in tests/test_page.py); a tensor and a buffer come from
sound files; a setter's refusal and an attribute without a getter are said in one line. Methods
at a control rate render to frames files and stream live over OSC (received by liblo's oscdump),
frames in play live from OSC; a method of several channels plays them, batched. A file made by
nn-tilde 1.5 (what acids-rave 2.3 exports with) lists an attribute ``none`` without a getter:
OSCQuery answers and ``/get`` says so. Every output is compared with the direct call of the
file, as nn~ makes it (``nn_files.direct``).
"""

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from jack import free_port, need, oscsend
from nn_files import RATIO, direct, legacy_file
from pythonosc.osc_message import OscMessage

import bendserver as tb
from bendserver.cli import main
from bendserver.control import Controller
from bendserver.osc.namespace import Namespace
from bendserver.presets.library import PresetLibrary
from bendserver.rackspec import RackSpec
from bendserver.render.frames import read_frames, write_frames
from bendserver.render.offline import render_file
from bendserver.serve import ServeOptions, Server

RATE, BLOCK = 44100, 2048

#: Attributes of each type, the values OSC or a score sends (numbers as Pd sends them: floats)
#: and the arguments nn~ gives the file's setter for them.
SCALARS = [
    ("gain", [0.25], (0.25,)),
    ("steps", [3.0], (3,)),
    ("flip", [1.0], (True,)),
    ("mode", ["clip"], ("clip",)),
    ("mix", [4.0, "wet", 0.25, 1.0], (4, "wet", 0.25, True)),
]


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    return legacy_file(tmp_path_factory.mktemp("legacy"))


def noise(channels, frames, seed=0, level=0.4):
    rng = np.random.default_rng(seed)
    return (level * rng.standard_normal((channels, frames))).astype(np.float32)


def sound(folder, name, signal, rate=RATE):
    """A float WAV of ``signal`` [channels, frames]: its samples read back exactly."""
    path = folder / name
    sf.write(path, signal.T, rate, subtype="FLOAT")
    return path


def table(folder):
    """A sound file for the tensor attribute: nn~ gives the setter its first channel."""
    return sound(folder, "table.wav", noise(2, 100, seed=4))


def buffer(folder, frames=1000):
    """A sound file for the buffer attribute: nn~ fills the buffer with its channels and rate."""
    return sound(folder, f"buffer{frames}.wav", noise(2, frames, seed=5), rate=22050)


def set_as_nn(module, name, arguments):
    """What nn~ does for ``set <name> ...``: a buffer filled first, then the setter."""
    if name == "buf":
        samples, rate = sf.read(arguments[0], dtype="float32", always_2d=True)
        module.set_buffer_attribute("buf#0", torch.from_numpy(samples.T.copy()), rate)
        arguments = ("buf#0",)
    elif name == "table":
        samples, _ = sf.read(arguments[0], dtype="float32", always_2d=True)
        arguments = (torch.from_numpy(samples[:, 0].copy()),)
    assert getattr(module, f"set_{name}")(*arguments) == 0


def nn_output(path, method, settings, signal):
    """``method`` of the file set by nn~ with ``settings`` [(name, arguments)], on ``signal``
    [channels, frames] (one call: the methods here are pointwise or whole frames)."""
    module = direct(path, RATE)
    for name, arguments in settings:
        set_as_nn(module, name, arguments)
    with torch.no_grad():
        return getattr(module, method)(torch.from_numpy(signal)[None])[0].numpy()


def every_setting(folder, method):
    """Every attribute ``method`` reads, set: (values sent, setter arguments) by name."""
    if method == "loud":
        path = [str(buffer(folder))]
        return {"buf": path}, {"buf": path}
    sent = {name: values for name, values, _ in SCALARS}
    given = {name: arguments for name, _, arguments in SCALARS}
    sent["table"] = given["table"] = [str(table(folder))]
    return sent, given


# -- attributes --------------------------------------------------------------------------------


def test_info_lists_each_attribute_with_its_types_and_value(kinds, capsys):
    assert main(["info", str(kinds), "--trust-model"]) == 0
    out = capsys.readouterr().out
    for line in (
        "gain (float) = 1.0",
        "steps (int) = 2",
        "flip (bool) = False",
        "mode (str; one of tanh|clip) = tanh",
        "mix (int, str, float, bool) = 1 dry 0.5 True",
        "table (tensor) = tensor [8]",
        "buf (buffer) = Buffer(empty)",
        "level: 1 ch x 1/1 -> 2 ch x 1/256",
        "hold: 2 ch x 1/256 -> 1 ch x 1/1",
        "spread: 2 ch x 1/1 -> 3 ch x 1/1",
    ):
        assert line in out, line
    assert "loud: not converted into a graph" in out and "Buffer" in out
    hidden = (  # the file's TorchScript class loads without the package that made it
        "import sys; sys.modules['nn_tilde'] = None; from bendserver.cli import main; "
        f"raise SystemExit(main(['info', {str(kinds)!r}, '--trust-model']))"
    )
    alone = subprocess.run([sys.executable, "-c", hidden], capture_output=True, text=True)
    assert alone.returncode == 0, alone.stderr
    assert "buf (buffer) = Buffer(empty)" in alone.stdout


@pytest.mark.parametrize("name, values, arguments", [*SCALARS, ("table", None, None)])
def test_an_attribute_set_over_osc_plays_as_the_file_s_own_setter(
    kinds, tmp_path, name, values, arguments
):
    if name == "table":
        values = arguments = [str(table(tmp_path))]
    engine = tb.StreamEngine(kinds, block=BLOCK, fuse=False)
    control = Controller(engine)
    x = noise(1, BLOCK)
    before = engine.process(x)
    control.dispatch(f"/attr/{name}", values)
    got = engine.process(x)
    assert "forward" not in engine.bended.unconverted, "the converted graph follows the setter"
    np.testing.assert_allclose(before, nn_output(kinds, "forward", [], x), atol=1e-6)
    np.testing.assert_allclose(got, nn_output(kinds, "forward", [(name, arguments)], x), atol=1e-6)
    assert not np.allclose(got, before), "the attribute changes the output"
    shown = control.dispatch(f"/get/attr/{name}")[0][1]
    assert shown == ([str(Path(values[0]).resolve())] if name == "table" else list(arguments))


def test_a_buffer_is_filled_from_a_sound_file_as_nn_fills_it_from_a_buffer(kinds, tmp_path):
    engine = tb.StreamEngine(kinds, method="loud", block=BLOCK, fuse=False)
    control = Controller(engine)
    x = noise(1, BLOCK)
    assert np.array_equal(engine.process(x), np.zeros_like(x)), "empty: the file gives zeros"
    path = buffer(tmp_path)
    control.dispatch("/attr/buf", [str(path)])
    got = engine.process(x)
    np.testing.assert_allclose(got, nn_output(kinds, "loud", [("buf", (str(path),))], x), rtol=1e-6)
    assert got[0, 0] > 0.2
    assert "sr=22050, shape=[2, 1000]" in engine.model.module.get_buf()[0]


def test_refusals_say_what_the_attribute_takes_and_change_nothing(kinds, legacy, tmp_path):
    engine = tb.StreamEngine(kinds, block=BLOCK, fuse=False)
    control = Controller(engine)
    for address, values, message in [
        ("/attr/steps", [0.0], "set_steps refuses 0 (it returned -1)"),
        ("/attr/steps", [2.5], "takes a whole number"),
        ("/attr/mode", ["fuzz"], "is one of tanh, clip, got 'fuzz'"),
        ("/attr/mix", [1.0, "dry"], "takes 4 values (int, str, float, bool), got 2"),
        ("/attr/flip", [2.0], "is 0 or 1"),
        ("/attr/gain", ["loud"], "takes a number"),
        ("/attr/table", [str(tmp_path / "missing.wav")], "takes a sound file: no file"),
        ("/attr/volume", [1.0], "no attribute 'volume'"),
    ]:
        with pytest.raises(tb.BendingError, match=re.escape(message)):
            control.dispatch(address, values)
    assert engine.state.attributes == (), "nothing was set"
    control.dispatch("/attr/buf", [str(buffer(tmp_path, frames=5000))])  # over its 4096
    engine.process(noise(1, BLOCK))
    assert engine.stats.errors == 1
    assert "set_buf returned -1" in " ".join(engine.failures())
    old = tb.StreamEngine(legacy, block=BLOCK, fuse=False)
    with pytest.raises(tb.BendingError, match="'none' has no getter .*nor set: it has no setter"):
        Controller(old).dispatch("/get/attr/none")
    with pytest.raises(tb.BendingError, match="'none' cannot be set: the file has no setter"):
        Controller(old).dispatch("/attr/none", [1.0])


@pytest.mark.parametrize("method", ["forward", "loud"])
def test_a_score_sets_attributes_of_each_type_as_the_setters_do(kinds, tmp_path, method):
    sent, given = every_setting(tmp_path, method)
    source = sound(tmp_path, "in.wav", noise(1, 3 * BLOCK))
    lines = [f"0 /attr/{name} " + " ".join(map(str, values)) for name, values in sent.items()]
    score = tmp_path / "score.txt"
    score.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.wav"
    args = ["render", str(source), "-m", f"{kinds}:{method}", "--score", str(score), "-o", str(out)]
    assert main([*args, "--no-fuse", "--trust-model"]) == 0
    rendered, _ = sf.read(out, dtype="float32", always_2d=True)
    signal, _ = sf.read(source, dtype="float32", always_2d=True)
    want = nn_output(kinds, method, list(given.items()), signal.T.copy())
    np.testing.assert_allclose(rendered.T, want, atol=1e-6)


@pytest.mark.parametrize("method", ["forward", "loud"])
def test_a_preset_saves_and_restores_attributes_of_each_type(kinds, tmp_path, method):
    sent, given = every_setting(tmp_path, method)
    library = PresetLibrary(user=tmp_path / "presets")
    first = tb.StreamEngine(kinds, method=method, block=BLOCK, fuse=False)
    control = Controller(first, library)
    for name, values in sent.items():
        control.dispatch(f"/attr/{name}", values)
    control.dispatch("/preset/save", ["kinds"])
    saved = json.loads((tmp_path / "presets" / "kinds.json").read_text())
    if method == "forward":
        assert saved["attributes"]["mix"] == [4, "wet", 0.25, True]
        assert saved["attributes"]["table"] == [str(Path(sent["table"][0]).resolve())]
    else:
        assert saved["attributes"] == {"buf": [str(Path(sent["buf"][0]).resolve())]}
    fresh = tb.StreamEngine(kinds, method=method, block=BLOCK, fuse=False)
    Controller(fresh, library).dispatch("/preset/load", ["kinds"])
    x = noise(1, BLOCK)
    want = nn_output(kinds, method, list(given.items()), x)
    np.testing.assert_allclose(fresh.process(x), want, atol=1e-6)
    other = tb.StreamEngine(tb.loader.load_model("drive"), block=256)
    with pytest.raises(tb.BendingError, match="preset 'kinds': no attribute '(gain|buf)'"):
        Controller(other, library).dispatch("/preset/load", ["kinds"])


# -- methods at a control rate, several channels ------------------------------------------------


def level_frames(kinds, signal):
    """The frames nn~'s direct call of ``level`` gives for ``signal``, block after block."""
    module = direct(kinds, RATE)
    blocks = [
        module.level(torch.from_numpy(signal[:, i : i + BLOCK])[None])[0]
        for i in range(0, signal.shape[-1], BLOCK)
    ]
    return torch.cat(blocks, -1).numpy()


@pytest.mark.parametrize("suffix", [".csv", ".npy"])
def test_a_method_giving_frames_renders_them_with_their_times(kinds, tmp_path, suffix):
    signal = noise(1, 5 * BLOCK)
    source = sound(tmp_path, "in.wav", signal)
    out = tmp_path / f"level{suffix}"
    assert main(["render", str(source), "-m", f"{kinds}:level", "-o", str(out)]) == 0
    frames = read_frames(out)
    assert frames.shape == (2, 5 * BLOCK // RATIO)
    np.testing.assert_array_equal(frames, level_frames(kinds, signal))
    if suffix == ".csv":
        rows = out.read_text().splitlines()
        assert rows[0] == "time,c0,c1"
        assert float(rows[2].split(",")[0]) == pytest.approx(RATIO / RATE, abs=1e-9)
    with pytest.raises(tb.BendingError, match="gives frames .*write them to a frames file"):
        render_file(tb.StreamEngine(kinds, method="level"), source, tmp_path / "level.wav")


def test_a_method_taking_frames_renders_a_frames_file_to_audio(kinds, tmp_path):
    frames = noise(2, 24, seed=2)
    source = tmp_path / "frames.csv"
    write_frames(source, frames, RATIO / RATE)
    out = tmp_path / "held.wav"
    assert main(["render", str(source), "-m", f"{kinds}:hold", "-o", str(out), "--no-fuse"]) == 0
    rendered, rate = sf.read(out, dtype="float32", always_2d=True)
    assert rate == RATE and rendered.shape == (24 * RATIO, 1)
    want = nn_output(kinds, "hold", [], np.ascontiguousarray(read_frames(source)))
    np.testing.assert_allclose(rendered.T, want, atol=1e-6)
    with pytest.raises(tb.BendingError, match="takes frames .*give a frames file"):
        render_file(tb.StreamEngine(kinds, method="hold"), source.with_suffix(".wav"), out)


def test_a_method_of_several_channels_plays_them_and_a_batch_of_streams(kinds, tmp_path):
    for channels in (2, 4):  # one stream of the method's two channels, then two streams
        signal = noise(channels, 3 * BLOCK, seed=channels)
        source = sound(tmp_path, f"in{channels}.wav", signal)
        out = tmp_path / f"spread{channels}.wav"
        assert (
            main(["render", str(source), "-m", f"{kinds}:spread", "-o", str(out), "--no-fuse"]) == 0
        )
        rendered, _ = sf.read(out, dtype="float32", always_2d=True)
        module = direct(kinds, RATE)
        batch = torch.from_numpy(signal).reshape(channels // 2, 2, -1)
        want = module.spread(batch).reshape(-1, signal.shape[-1]).numpy()
        assert rendered.shape == (signal.shape[-1], 3 * channels // 2)
        np.testing.assert_allclose(rendered.T, want, atol=1e-6)


# -- live: frames out over OSC, frames in ---------------------------------------------------


def dumped(lines, address):
    """The arguments of each complete message oscdump printed for ``address``."""
    rows = [line.split() for line in lines if f" {address} " in line]
    width = max((len(row) for row in rows), default=0)
    return np.array([[float(v) for v in row[3:]] for row in rows if len(row) == width])


def test_frames_stream_live_over_osc_to_oscdump_as_the_direct_call_gives_them(kinds, tmp_path):
    need("oscdump")
    port = free_port()
    signal = noise(1, 40 * BLOCK, seed=9)
    source = sound(tmp_path, "in.wav", signal)
    log = tmp_path / "oscdump.txt"  # a file: a full pipe would stall oscdump, losing messages
    dump = subprocess.Popen(["oscdump", "-L", str(port)], stdout=log.open("w"))
    options = ServeOptions(
        rack=RackSpec.chain([f"{kinds}:level"]), audio="null", input=str(source), osc_port=0,
        reply_port=port, oscquery_port=0, frame_rate=1000.0, trust_model=True,
    )  # fmt: skip
    try:
        time.sleep(0.3)  # oscdump listens
        with Server(options) as server:
            time.sleep(1.0)
        sent = server.frames.sent
    finally:
        dump.terminate()
        dump.wait(timeout=5)
    lines = log.read_text().splitlines()
    got = dumped(lines, "/out/kinds_level/level")
    assert len(got) >= 100 and len(got) >= sent - 2, (len(got), sent)
    want = level_frames(kinds, np.tile(signal, 2)).T[: len(got)]
    np.testing.assert_allclose(got, want, atol=2e-6)  # oscdump prints 6 decimals


def test_a_latent_edge_of_a_rack_streams_to_a_subscriber_at_the_frame_rate(
    kinds, tmp_path, replies
):
    options = ServeOptions(
        rack=RackSpec.chain([f"{kinds}:level", f"{kinds}:hold"]), audio="null",
        input=str(sound(tmp_path, "in.wav", noise(1, RATE))), osc_port=0,
        reply_port=replies.port, oscquery_port=0, frame_rate=40.0, trust_model=True,
    )  # fmt: skip
    with Server(options) as server:
        time.sleep(0.3)
        assert replies.receive(timeout=0.3) == [], "the rack gives audio: frames on request"
        oscsend(server.osc.port, "/out/subscribe")
        assert replies.wait_for("/out/subscribed") == ["/out/kinds_level/level"]
        received, started = [], time.monotonic()
        replies.socket.settimeout(0.1)
        while time.monotonic() < started + 1.0:  # the frames come without a pause: one by one
            with contextlib.suppress(TimeoutError):
                message = OscMessage(replies.socket.recv(65536))
                received.append((message.address, list(message.params)))
        seconds = time.monotonic() - started
        received = [r for r in received if r[0] == "/out/kinds_level/level"]
        oscsend(server.osc.port, "/out/unsubscribe")
        assert replies.wait_for("/out/unsubscribed") == [1]
    assert 0.7 * 40 * seconds < len(received) <= 40 * seconds + 2, (len(received), seconds)
    assert all(len(args) == 2 for _, args in received)


def test_frames_sent_over_osc_play_live_through_a_method_taking_frames(kinds, tmp_path):
    record = tmp_path / "held.wav"
    options = ServeOptions(
        rack=RackSpec.chain([f"{kinds}:hold"]), audio="null", osc_port=0,
        reply_port=free_port(), oscquery_port=0, record=str(record), trust_model=True,
        no_fuse=True,  # the fuse's DC blocker would take a held value down to 0
    )  # fmt: skip
    frame = [0.5, 0.25]
    with Server(options) as server:
        tree = Namespace(server.controller)
        assert tree.node("/in/kinds_hold/hold")["TYPE"] == "ff"
        assert tree.node("/out/subscribe") is not None
        oscsend(server.osc.port, "/in/kinds_hold/hold", "ff", *frame)
        deadline = time.monotonic() + 5
        while server.frames.held.updates == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        with pytest.raises(tb.BendingError, match="a frame here is 2 values"):
            server.controller.dispatch("/in/kinds_hold/hold", [1.0])
    recorded, _ = sf.read(record, dtype="float32")
    held = nn_output(kinds, "hold", [], np.array([[0.5], [0.25]], np.float32))[0, 0]
    assert recorded[0] == 0.0, "silence until the first frame"
    assert recorded[-RATIO] == pytest.approx(held, abs=1e-6)


# -- a file from nn-tilde 1.5 (acids-rave 2.3's exports) -----------------------------------------


def test_a_legacy_file_serves_its_namespace_and_says_none_has_no_getter(legacy, replies):
    options = ServeOptions(
        model=str(legacy), audio="null", osc_port=0, reply_port=replies.port, zeroconf=False,
        trust_model=True,
    )  # fmt: skip
    with Server(options) as server:
        with urllib.request.urlopen(server.oscquery.url + "/", timeout=5) as response:
            assert response.status == 200
            tree = json.load(response)
        attributes = tree["CONTENTS"]["attr"]["CONTENTS"]
        assert attributes["none"] == {
            "FULL_PATH": "/attr/none",
            "ACCESS": 0,
            "DESCRIPTION": "nn~ attribute none (no setter; no getter)",
        }
        assert attributes["gain"]["TYPE"] == "f" and attributes["gain"]["VALUE"] == [1.0]
        oscsend(server.osc.port, "/get/attr/none")
        assert "has no getter (get_none)" in replies.wait_for("/error")[1]
        oscsend(server.osc.port, "/attr/gain", "f", 0.5)
        deadline = time.monotonic() + 5  # the set applies once its graph is built
        while True:
            oscsend(server.osc.port, "/get/attr/gain")
            gain = replies.wait_for("/get/attr/gain")
            if gain == [0.5] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert gain == [0.5]


def test_a_legacy_file_s_frames_render_as_its_direct_call(legacy, tmp_path):
    signal = noise(1, 4 * BLOCK)
    out = tmp_path / "encode.npy"
    source = sound(tmp_path, "in.wav", signal, rate=48000)
    assert main(["render", str(source), "-m", f"{legacy}:encode", "-o", str(out)]) == 0
    with torch.no_grad():
        want = direct(legacy).encode(torch.from_numpy(signal)[None])[0].numpy()
    np.testing.assert_allclose(read_frames(out), want, atol=1e-6)


# -- RAVE exports of the shared builder (acids-rave 2.3.1, nn-tilde 1.5.6) ------------------------

RAVE_DIR = Path(os.environ.get("BENDSERVER_RAVE_DIR", "/nonexistent"))
RAVE = RAVE_DIR / "rave_v2_streaming.ts"
rave = pytest.mark.skipif(not RAVE.is_file(), reason="BENDSERVER_RAVE_DIR holds no RAVE export")


def rave_encode(signal):
    """RAVE's ``encode`` of ``signal`` block after block, as nn~ calls it, from seed 0."""
    module = direct(RAVE, RATE)
    torch.manual_seed(0)
    with torch.no_grad():
        blocks = [
            module.encode(torch.from_numpy(signal[:, i : i + BLOCK])[None])[0]
            for i in range(0, signal.shape[-1], BLOCK)
        ]
    return torch.cat(blocks, -1).numpy()


@rave
@pytest.mark.parametrize(
    "name",
    [
        "rave_v2_streaming.ts",
        # the v2 export's attributes again, on another graph of the same builder
        pytest.param("rave_causal_streaming.ts", marks=pytest.mark.slow),
        "brave_c128_streaming.ts",
    ],
)
def test_a_rave_export_serves_its_namespace_and_every_attribute_reads_back(name, replies):
    path = RAVE_DIR / name
    if not path.is_file():
        pytest.skip(f"BENDSERVER_RAVE_DIR holds no {name}")
    options = ServeOptions(
        model=str(path), audio="null", osc_port=0, reply_port=replies.port, zeroconf=False,
        trust_model=True, latency=0,
    )  # fmt: skip
    with Server(options) as server:
        with urllib.request.urlopen(server.oscquery.url + "/", timeout=10) as response:
            assert response.status == 200
            tree = json.load(response)
        assert tree["DESCRIPTION"].startswith(f"bendserver: {path.stem} (forward, ")
        listed = server.controller.dispatch("/list", ["attributes"])[0][1]
        assert listed[0] == "none" and len(listed) > 1
        for attribute in listed:
            node = tree["CONTENTS"]["attr"]["CONTENTS"][attribute]
            oscsend(server.osc.port, f"/get/attr/{attribute}")
            if attribute == "none":
                assert node["ACCESS"] == 0 and "VALUE" not in node
                assert "has no getter (get_none)" in replies.wait_for("/error")[1]
            else:
                assert node["TYPE"] == "i" and node["VALUE"] == [0]  # a bool, off
                assert replies.wait_for(f"/get/attr/{attribute}") == [0]


@rave
def test_a_rave_encode_renders_frames_and_its_decode_plays_them_as_the_direct_calls(tmp_path):
    signal = noise(1, 12 * BLOCK, seed=3, level=0.3)
    source = sound(tmp_path, "in.wav", signal)
    latents = tmp_path / "latents.csv"
    assert main(["render", str(source), "-m", f"{RAVE}:encode", "-o", str(latents)]) == 0
    frames = read_frames(latents)
    want = rave_encode(signal)
    assert frames.shape == want.shape == (want.shape[0], 12)
    np.testing.assert_allclose(frames, want, atol=1e-5, rtol=1e-5)
    out = tmp_path / "decoded.wav"
    args = ["render", str(latents), "-m", f"{RAVE}:decode", "-o", str(out), "--no-fuse"]
    assert main([*args, "--keep-latency"]) == 0
    decoded, _ = sf.read(out, dtype="float32", always_2d=True)
    module = direct(RAVE, RATE)
    torch.manual_seed(0)
    padded = np.pad(frames, ((0, 0), (0, -(-tb.load_model(RAVE).latency // BLOCK))))
    with torch.no_grad():
        played = [module.decode(torch.from_numpy(padded[:, i : i + 1])[None])[0] for i in
                  range(padded.shape[-1])]  # fmt: skip
    np.testing.assert_allclose(decoded.T, torch.cat(played, -1).numpy()[:, : decoded.shape[0]],
                               atol=1e-5, rtol=1e-5)  # fmt: skip


@rave
def test_a_rave_encode_streams_live_to_oscdump_at_its_frame_rate(tmp_path):
    need("oscdump")
    port = free_port()
    signal = noise(1, 32 * BLOCK, seed=6, level=0.3)
    log = tmp_path / "oscdump.txt"  # a file: a full pipe would stall oscdump, losing messages
    dump = subprocess.Popen(["oscdump", "-L", str(port)], stdout=log.open("w"))
    options = ServeOptions(
        rack=RackSpec.chain([f"{RAVE}:encode"]), audio="null",
        input=str(sound(tmp_path, "in.wav", signal)), osc_port=0, reply_port=port,
        oscquery_port=0, seed=0, trust_model=True, latency=0,
    )  # fmt: skip
    try:
        time.sleep(0.3)
        with Server(options) as server:
            deadline = time.monotonic() + 10
            while server.frames.sent < 48 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        dump.terminate()
        dump.wait(timeout=5)
    lines = log.read_text().splitlines()
    got = dumped(lines, "/out/rave_v2_streaming_encode/encode")
    arrivals = [
        int(line.split()[0].split(".")[0], 16) + int(line.split()[0].split(".")[1], 16) / 2**32
        for line in lines
        if "/out/" in line
    ]
    rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
    assert len(got) >= 46 and got.shape[1] == 128
    assert 0.9 * RATE / BLOCK < rate < 1.1 * RATE / BLOCK, f"{rate:.2f} frames a second"
    want = rave_encode(np.tile(signal, 3)).T[: len(got)]
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)  # oscdump prints 6 decimals
