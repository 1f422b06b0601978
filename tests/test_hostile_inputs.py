"""Hostile inputs to the newer surfaces: values past what their consumer holds, a control worker
that must outlive any bug, code loaded only from where the person at the machine allows, and
every reader's bounds (one line naming the limit). Live servers run on the null backend."""

import dataclasses
import gc
import hashlib
import json
import logging
import re
import socket
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from crashing import crashing_model
from jack import Replies, oscsend
from pythonosc.osc_message_builder import build_msg
from streaming import Identity

import bendserver as tb
from bendserver import audiofile, limits, switching
from bendserver.audiofile import read_audio, sound_info
from bendserver.cli import build_parser, main
from bendserver.compat import unlink_fx_node
from bendserver.control import Controller
from bendserver.control import controller as control
from bendserver.errors import BendingError, describe
from bendserver.midi.mappings import read_mappings
from bendserver.osc import Incoming
from bendserver.osc.replies import ReplySender
from bendserver.osc.worker import ControlWorker
from bendserver.presets.library import PresetLibrary, check_name, read_preset
from bendserver.rackspec import RackSpec
from bendserver.render import offline as render
from bendserver.render.manifest import MANIFEST
from bendserver.render.offline import ScorePlayer, parse_score, render_file
from bendserver.render.worker import pending
from bendserver.serve import ServeOptions, Server

BLOCK = 256


def engine() -> tb.StreamEngine:
    return tb.StreamEngine(Identity(), block=BLOCK, fuse=False)


# -- 2: the control thread cannot die ------------------------------------------------------------

HUGE_RAMP = {"address": "/engine/gain", "kind": "cc", "channel": 1, "number": 7, "ramp_ms": 1e300}


def test_a_ramp_no_reply_can_carry_is_refused_where_it_is_read(tmp_path):
    preset = tmp_path / "huge.json"
    preset.write_text(
        json.dumps({"format": "bendserver.config", "version": 1, "midi": [HUGE_RAMP]})
    )
    with pytest.raises(BendingError, match=r"huge.json: midi\[0\]: ramp_ms is 0..600000, got 1e"):
        read_preset(preset)
    mappings = tmp_path / "desk.json"
    mappings.write_text(json.dumps({"mappings": [{**HUGE_RAMP, "ramp_ms": 600_001}]}))
    with pytest.raises(BendingError, match=r"mappings\[0\]: ramp_ms is 0..600000, got 600001"):
        read_mappings(mappings)
    mappings.write_text(json.dumps({"mappings": [{**HUGE_RAMP, "ramp_ms": 0, "high": 1e39}]}))
    with pytest.raises(BendingError, match="within ±3.40282e"):
        read_mappings(mappings)


@pytest.fixture
def worker(tmp_path):
    """A control worker replying over UDP (the real sender) to a listener; its presets in a
    folder of the test."""
    listener = Replies()
    replies = ReplySender(listener.port, "127.0.0.1")
    running = ControlWorker(Controller(engine(), PresetLibrary(tmp_path / "presets")), replies)
    running.start()
    yield running, listener
    running.stop()
    replies.close()
    listener.close()


def ask(worker, listener, address, *args):
    worker.submit(Incoming(address, args), "127.0.0.1")
    return listener.receive(timeout=2.0)


def test_a_bug_in_a_handler_or_its_replies_is_answered_logged_once_and_the_worker_goes_on(
    worker, monkeypatch, caplog
):
    """The finding: a preset's mapping with ramp_ms 1e300, then /midi/list: the reply could not
    be encoded (OverflowError) and the worker's thread ended: nothing was answered again. Now a
    reply that cannot be sent, and an error between two messages, are each answered or logged
    (the traceback once), and the worker answers on."""
    running, listener = worker
    ping = control.route("/ping")
    broken = control.Match(
        dataclasses.replace(ping.entry, handler=lambda *a: [("/pong", [1e300])]), {}
    )
    monkeypatch.setattr(control, "route", lambda address: broken if address == "/ping" else ping)
    first = ask(running, listener, "/ping")
    second = ask(running, listener, "/ping")
    monkeypatch.undo()
    assert first == second == [
        ("/error", ["/ping", "internal error, a bug in bendserver: OverflowError: float too "
                    "large to pack with f format"])
    ]  # fmt: skip
    calls = []

    def due():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a schedule out of order")
        return []

    monkeypatch.setattr(running.controller, "due", due)
    time.sleep(0.5)
    assert ask(running, listener, "/ping") == [("/pong", [])]
    assert running.thread.is_alive() and len(calls) > 1
    bugs = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in bugs] == [
        "/ping: " + first[0][1][1],
        "/ping: " + first[0][1][1],
        "the control worker: internal error, a bug in bendserver: RuntimeError: a schedule out "
        "of order",
    ]
    assert [r.exc_info is not None for r in bugs] == [True, False, True], "a traceback once"


# -- 1: loading code is a decision of the person at the machine ---------------------------------

PWN = """\
import pathlib
pathlib.Path({marker!r}).write_text("ran")
"""


def planted(folder):
    """A Python file and a model folder whose code, once imported, writes a marker file."""
    folder.mkdir()
    marker = folder / "ran"
    (folder / "pwn.py").write_text(PWN.format(marker=str(marker)))
    model = crashing_model(folder / "model", top=PWN.format(marker=str(marker)))
    return marker, [f"{folder / 'pwn.py'}:X", str(model), f"{folder}/../{folder.name}/pwn.py:X"]


def test_a_message_loads_code_only_from_the_model_folders_and_those_allowed(tmp_path, replies):
    """The finding: /model/load path/pwn.py:X imported the file (and the probe's child ran it)
    although the reply was '... defines no torch.nn.Module named X'. Now a path to Python code
    outside the model folders is refused before anything runs, over OSC as from the page; with
    serve --allow-code-from its folder, the same model folder loads."""
    marker, sources = planted(tmp_path / "elsewhere")
    options = ServeOptions(
        model="drive", preset="none", audio="null", block=BLOCK, osc_port=0, oscquery_port=0,
        reply_port=replies.port, xfade_ms=0,
    )  # fmt: skip
    with Server(options) as server:
        for source in sources:
            oscsend(server.osc.port, "/model/load", "s", source)
            address, message = replies.wait_for("/error", timeout=30)
            assert address == "/model/load" and message == (
                f"model {source!r} is Python code outside the model folders: a live server "
                "imports code only from its model folders (load those by name) and the folders "
                "given to serve --allow-code-from DIR; TorchScript files (.ts) load from anywhere"
            )
        assert not marker.exists(), "nothing was imported, not even by the probe's child"
        oscsend(server.osc.port, "/node/drive/load", "s", sources[1])
        assert "Python code outside the model folders" in replies.wait_for("/error")[1]
        server.controller.switcher.code_from = [str(tmp_path / "elsewhere")]  # --allow-code-from
        oscsend(server.osc.port, "/model/load", "s", sources[1])
        loaded = replies.wait_for("/model/loaded", timeout=60)
    assert loaded[0] == "model" and marker.read_text() == "ran"


def test_serve_takes_allow_code_from():
    args = build_parser().parse_args(["serve", "--allow-code-from", "a", "--allow-code-from", "b"])
    assert args.allow_code_from == ["a", "b"]
    assert ServeOptions(allow_code_from=args.allow_code_from).allow_code_from == ["a", "b"]


# -- 10: live loads, one at a time, and the memory they leave -------------------------------------


def served_drive(replies, **extra):
    return ServeOptions(
        model="drive", preset="none", audio="null", block=BLOCK, osc_port=0, oscquery_port=0,
        reply_port=replies.port, xfade_ms=0, **extra,
    )  # fmt: skip


def test_one_load_runs_at_a_time_and_loads_begin_at_most_one_a_second(
    tmp_path, replies, monkeypatch
):
    """A load sent while another runs is refused at once (it was held and run after it); one
    sent right after a load began is refused with the time to wait."""
    slow = crashing_model(tmp_path / "slow", top="import time; time.sleep(1.5)")
    with Server(served_drive(replies, allow_code_from=[str(tmp_path)])) as server:
        port = server.osc.port
        oscsend(port, "/model/load", "s", str(slow))
        time.sleep(0.5)
        oscsend(port, "/model/load", "s", "wavae")
        refused = replies.wait_for("/error", timeout=10)
        first = replies.wait_for("/model/loaded", timeout=30)  # after the refusal
        oscsend(port, "/model/load", "s", "wavae")
        second = replies.wait_for("/model/loaded", timeout=30)
        monkeypatch.setattr(switching, "LOAD_INTERVAL", 30.0)  # longer than a load takes
        oscsend(port, "/model/load", "s", "drive")
        third = replies.wait_for("/error", timeout=10)
    assert refused == [
        "/model/load",
        f"a load of {str(slow)!r} runs: one load at a time; send this one again once it is "
        "answered",
    ]
    assert first[0] == "slow" and second[0] == "wavae"
    assert re.fullmatch(
        r"a load began \d+\.\d\d s ago: loads begin at most one every 30 s; send this one "
        r"again in \d+\.\d\d s",
        third[1],
    )


def test_a_replaced_model_leaves_nothing_behind(replies, monkeypatch):
    """The finding: 60 loads drive <-> wavae grew the server by 112 MB: each replaced node's
    reference cycles (its fx graphs, ~9 000 objects) had been set aside from the collector
    (gc.freeze) and were never freed. Now they are broken when the node is released: the node
    and its graph modules are freed by reference counting, with no collection, anything of it
    still referred to elsewhere is emptied, and each load sets aside a few objects at most."""
    monkeypatch.setattr(switching, "LOAD_INTERVAL", 0.0)
    with Server(served_drive(replies)) as server:
        port = server.osc.port
        frozen = []
        for model in ("wavae", "drive", "wavae", "drive"):
            replaced = server.engine.node
            held = [replaced, *(item for item in switching._reachable(replaced) if _fx(item))]
            refs = [weakref.ref(item) for item in held]
            del replaced, held
            gc.collect()  # what the tests before left: not the load's
            before = gc.get_freeze_count()
            oscsend(port, "/model/load", "ss", model, "none")
            assert replies.wait_for("/model/loaded", timeout=60)[0] == model
            frozen.append(gc.get_freeze_count() - before)
            alive = [ref() for ref in refs if ref() is not None]
            assert refs[0]() is None and len(refs) > 2, "the node is freed"
            assert not [type(item).__name__ for item in alive if vars(item)], "the rest emptied"
    pair = frozen[2] + frozen[3]  # the new models frozen, the old ones freed
    assert pair < 600, f"objects set aside for good by each pair of loads: {frozen}"


def _fx(item: object) -> bool:
    return isinstance(item, (torch.fx.Graph, torch.fx.GraphModule))


# -- 13: a datagram too large, a port that is none, a name Windows keeps --------------------------


def test_a_datagram_too_large_for_the_server_is_answered(replies):
    """The finding: a 60 KB OSC string was dropped with no /error (only counted)."""
    with Server(served_drive(replies)) as server, socket.socket(type=socket.SOCK_DGRAM) as sock:
        sock.sendto(build_msg("/preset/load", ["x" * 60_000]).dgram, ("127.0.0.1", server.osc.port))
        refused = replies.wait_for("/error")
        counters = server.osc.counters()
    assert refused == [
        "/preset/load",
        "a datagram of 60024 bytes is larger than the 4032 bytes the server takes: send fewer "
        "or shorter arguments",
    ]
    assert counters["dropped_large"] == 1 and counters["osc_errors"] == 1


def test_a_port_past_65535_is_refused_as_an_argument(capsys):
    """The finding: --osc-port 70000 said "another program may use the port"."""
    for option in ("--osc-port", "--reply-port", "--oscquery-port"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", option, "70000"])
        assert f"argument {option}: a port is 0 to 65535, got 70000" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["con", "NUL", "Aux", "prn", "com1", "LPT9"])
def test_names_windows_keeps_for_its_devices_are_no_preset_names(name, tmp_path):
    """The finding: presets named con, nul, aux were saved (files no Windows can copy)."""
    ctl = Controller(engine(), PresetLibrary(tmp_path))
    for address in ("/preset/save", "/midi/save"):
        with pytest.raises(BendingError, match=f"'{name}' names a device on Windows"):
            ctl.dispatch(address, [name])
    assert not list(tmp_path.iterdir())
    assert check_name("console") == "console" and check_name("com10") == "com10"


def test_unlinked_fx_nodes_free_their_graph_without_the_collector():
    """What a released node's graphs go through (compat.unlink_fx_node): fx's nodes refer to
    each other both ways; once each is unlinked, reference counting frees the graph."""

    class Two(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2 + x

    graph = torch.fx.Tracer().trace(Two())
    nodes = [graph._root, *graph.nodes]
    refs = [weakref.ref(graph), *(weakref.ref(node) for node in nodes)]
    gc.collect()  # the tracer's own cycles
    gc.disable()
    try:
        for node in nodes:
            unlink_fx_node(node)
        vars(graph).clear()
        del graph, nodes, node
        assert all(ref() is None for ref in refs)
    finally:
        gc.enable()


# -- 12: listeners beyond loopback ---------------------------------------------------------------


def test_ray_is_not_started_on_every_interface_unless_asked_for(tmp_path, capsys):
    """The finding: render --ray started Ray's services on every interface. Ray cannot keep
    them to loopback (it turns 127.0.0.1 into the machine's address), so a Ray of its own is
    started only by --ray local; --ray alone says what to do."""
    ray = pytest.importorskip("ray")
    source = tmp_path / "in.wav"
    sf.write(source, np.zeros(4800, np.float32), 48000)
    argv = ["render", str(source), "-m", "drive", "-p", "none", "-o", str(tmp_path / "out.wav")]
    assert main([*argv, "--ray"]) == 2
    assert not ray.is_initialized() and not (tmp_path / "out.wav").exists()
    assert capsys.readouterr().err == (
        "bendserver: --ray needs the address of a cluster (--ray auto, --ray ray://HEAD:10001): "
        "a Ray started here listens on every interface of this machine (Ray cannot keep it to "
        "loopback); --workers N renders here in a process pool, --ray local starts Ray anyway\n"
    )


# -- 8: render manifests keep only what they made, writes never follow a link -------------------


def rendered_folder(tmp_path):
    """Three short files rendered through drive by two processes into ``out``; the command."""
    source = tmp_path / "in"
    source.mkdir()
    rng = np.random.default_rng(0)
    for index in range(3):
        sf.write(source / f"f{index}.wav", 0.3 * rng.standard_normal(12_000), 48000)
    argv = ["render", str(source), "-m", "drive", "-p", "none", "-o", str(tmp_path / "out")]
    argv += ["--workers", "2"]
    assert main(argv) == 0
    return tmp_path / "out", argv


def test_a_manifest_keeps_only_the_files_it_made_as_it_made_them(tmp_path, capsys):
    """The finding: after truncating one output and overwriting another with garbage, the same
    render kept both ("made by the same model") and exited 0: the manifest recorded no digest
    of what it made."""
    out, argv = rendered_folder(tmp_path)
    made = {name: (out / name).read_bytes() for name in ("f0.wav", "f1.wav", "f2.wav")}
    (out / "f0.wav").write_bytes(made["f0.wav"][:1000])
    (out / "f1.wav").write_bytes(b"garbage" * 100)
    capsys.readouterr()
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"bendserver: {out / 'f0.wav'} changed since this render made it: pass --force to "
        "overwrite it\n"
    )
    assert main([*argv, "--force"]) == 0
    assert {name: (out / name).read_bytes() for name in made} == made
    assert main(argv) == 0 and capsys.readouterr().out.count("kept") == 3


def edit_forms(out, edit, sign: bool):
    manifest = out / MANIFEST
    data = json.loads(manifest.read_text())
    edit(data["forms"])
    if sign:  # the digest made again: an edit on purpose
        data["forms_sha256"] = hashlib.sha256(
            json.dumps(data["forms"], sort_keys=True).encode()
        ).hexdigest()
    manifest.write_text(json.dumps(data))
    (out / "f2.wav").unlink(missing_ok=True)  # a file to render with those forms


def test_a_manifest_whose_forms_were_edited_or_do_not_fit_is_refused(tmp_path, capsys):
    """The finding: form names edited in the manifest rendered 47 errors into a file it
    recorded as done (exit 0), or said "internal error ... KeyError: 'bogus'"."""
    out, argv = rendered_folder(tmp_path)
    before = (out / MANIFEST).read_text()

    def bogus(forms):
        forms[0][1] = "bogus"

    edit_forms(out, bogus, sign=False)
    capsys.readouterr()
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"bendserver: {out / MANIFEST}: its convolution forms were edited since bendserver "
        "wrote them: remove it (the files are then rendered again)\n"
    )

    def folded(forms):
        (entry,) = [e for e in forms if len(e[0]) == 5][:1]  # a plain convolution's
        entry[1] = "folded"  # a transposed convolution's form

    (out / MANIFEST).write_text(before)
    edit_forms(out, folded, sign=True)
    assert main(argv) == 2
    assert "the form 'folded' cannot compute the convolution of input" in capsys.readouterr().err
    assert not (out / "f2.wav").exists(), "refused before anything is rendered"


def test_a_link_at_the_manifests_or_a_pending_files_place_is_refused(tmp_path, capsys):
    """The finding: a link planted at the manifest's or a pending file's place had the write
    land at its target."""
    out, argv = rendered_folder(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (out / MANIFEST).rename(elsewhere)  # a manifest that reads well, through the link
    kept = elsewhere.read_bytes()
    (out / MANIFEST).symlink_to(elsewhere)
    capsys.readouterr()
    assert main([*argv, "--force"]) == 2
    assert "render.json is a symbolic link" in capsys.readouterr().err
    (out / MANIFEST).unlink()
    (out / MANIFEST).write_bytes(kept)
    (out / "f1.wav").unlink()
    pending(out / "f1.wav").symlink_to(elsewhere)
    assert main(argv) == 2
    assert "bendserver-pending.wav is a symbolic link" in capsys.readouterr().err
    assert elsewhere.read_bytes() == kept


# -- 9: a rack's preset given to one model ---------------------------------------------------------


def test_a_racks_preset_on_one_model_plays_that_nodes_part_or_is_refused(tmp_path, capsys):
    """The finding: -m drive -p a rack preset of {"nodes": {"drive": {... gain 0.25}}} played
    at full level, exit 0, and one naming an unknown node played as -p none."""
    part = {"format": "bendserver.config", "version": 1, "engine": {"gain": 0.25, "mix": 1.0}}
    presets = {
        "plain": part,
        "rack": {"nodes": {"drive": part}},
        "other": {"nodes": {"nothing": part}},
        "none": None,
    }
    source = tmp_path / "in.wav"
    sf.write(source, 0.3 * np.random.default_rng(0).standard_normal(24_000), 48000)
    out = {}
    for name, preset in presets.items():
        given = "none"
        if preset is not None:
            given = str(tmp_path / f"{name}.json")
            Path(given).write_text(json.dumps(preset))
        target = tmp_path / f"{name}.wav"
        code = main(["render", str(source), "-m", "drive", "-p", given, "-o", str(target)])
        out[name] = (code, target.read_bytes() if target.exists() else None)
    assert out["rack"] == out["plain"] and out["rack"][0] == 0 and out["rack"] != out["none"]
    assert out["other"] == (2, None)
    assert "preset 'other' sets nodes ['nothing'] this rack does not play (its nodes: drive)" in (
        capsys.readouterr().err
    )


# -- 10, 11: every reader bounds what it accepts, in one line naming the limit -------------------


def test_sound_files_beyond_what_a_host_plays_are_refused_before_they_are_read(tmp_path):
    """The finding: a 20 KB WAV declaring 1 Hz was resampled until an out-of-memory kill, a
    244-byte one rendered "100.00 s", a 16 KB one of 1 000 channels took 57 s and 1.5 GB."""
    slow = tmp_path / "rate1.wav"
    sf.write(slow, np.zeros(5000, np.float32), 1, subtype="FLOAT")
    wide = tmp_path / "wide.wav"
    sf.write(wide, np.zeros((4, 1000), np.int16), 48000, subtype="PCM_16")
    with pytest.raises(BendingError, match="rate1.wav is at 1 Hz: sound files are read and "):
        read_audio(slow, 48000, 1)
    with pytest.raises(BendingError, match="wide.wav has 1000 channels: a sound file played has"):
        read_audio(wide, 48000, 1)
    engine = tb.StreamEngine(Identity(), block=BLOCK)
    fine = tmp_path / "fine.wav"
    sf.write(fine, np.zeros(4800, np.float32), 48000)
    with pytest.raises(BendingError, match="the output is at 1 Hz"):
        render_file(engine, fine, tmp_path / "out.wav", sample_rate=1)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--channels", "65"])


def test_a_sound_file_longer_than_the_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(audiofile, "MAX_SOUND_SECONDS", 1)
    long = tmp_path / "long.wav"
    sf.write(long, np.zeros(96_000, np.float32), 48000)
    with pytest.raises(BendingError, match="long.wav lasts 2 s: a sound file read lasts at most 1"):
        sound_info(long)


def test_a_score_holds_a_bounded_number_of_messages_and_of_changes(monkeypatch):
    """The finding: a 4.6 MB score of 200 000 /preset/load lines ran past 300 s (each
    rebuilds the model's graph: 40 ms for drive, measured)."""
    monkeypatch.setattr(render, "MAX_SCORE_EVENTS", 10)
    monkeypatch.setattr(render, "MAX_SCORE_CHANGES", 3)
    with pytest.raises(BendingError, match="score:11: a score holds at most 10 messages: split"):
        parse_score("".join(f"{i / 100} /engine/gain 0.5\n" for i in range(11)))
    changes = parse_score("".join(f"{i / 100} /bend/clear\n" for i in range(4)))
    with pytest.raises(BendingError, match="score:4: at 0.03 s, /bend/clear: a score makes at "):
        ScorePlayer(engine(), changes)
    ScorePlayer(engine(), changes[:3] + parse_score("0.5 /engine/gain 0.5\n" * 6))


def test_rack_files_are_bounded_in_size_depth_nodes_and_edges(tmp_path, monkeypatch):
    """The finding: a rack nested 5 000 deep was "internal error ... RecursionError"; a 98 KB
    rack of 2 000 nodes ran past 300 s and 1.8 GB in info; rack files were read whole
    whatever their size (200 MB)."""
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(BendingError, match="deep.toml is nested more than 32 levels deep"):
        RackSpec.read(deep)
    large = tmp_path / "large.toml"
    large.write_text("# " + "x" * 2**20 + "\n")
    with pytest.raises(BendingError, match=r"large.toml is 1048579 bytes; at most 1048576 are"):
        RackSpec.read(large)
    many = tmp_path / "many.toml"
    many.write_text("".join(f'[[node]]\nname = "n{i}"\nmodel = "drive"\n' for i in range(65)))
    with pytest.raises(BendingError, match="at most 64 nodes .* this one has 65 and 0"):
        RackSpec.read(many).check()
    with pytest.raises(BendingError, match="at most 64 nodes"):
        RackSpec.chain(["drive"] * 65).check()


def test_a_model_is_named_in_a_bounded_number_of_characters_and_errors_stay_short(capsys):
    """The finding: a 50 MB model string came back as a 50 MB error line."""
    long = "x" * 100_000
    with pytest.raises(BendingError, match="a model is named in at most 4096 characters"):
        tb.load_model(long)
    assert main(["info", long]) == 2
    assert capsys.readouterr().err == (
        "bendserver: a model is named in at most 4096 characters (a name, a path, "
        "file.py:Class); this one has 100000\n"
    )
    said = describe(BendingError(f"no preset {long!r}"))
    assert len(said) < 2100 and said.endswith("... (98012 characters more)")


# -- the limits, in one place, documented ---------------------------------------------------------


def test_docs_security_lists_every_limit_with_its_value():
    page = (Path(__file__).parent.parent / "docs" / "security.md").read_text()
    named = {name: value for name, value in vars(limits).items() if name.isupper()}
    assert len(named) > 20
    for name, value in named.items():
        whole = float(value).is_integer() and value < 1e15
        shown = f"{int(value):,}".replace(",", " ") if whole else f"{value:g}"
        assert f"| `{name}` | {shown} |" in page, f"{name} = {value} is not in docs/security.md"
