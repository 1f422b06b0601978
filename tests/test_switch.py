"""Switching models live: a rack's node swapped with a crossfade at a block boundary, and
``/model/load`` and ``/node/<node>/load`` on a server playing through a dummy JACK server, sent
with ``oscsend``: bad models answered with ``/error`` while the old model plays on, a good one
crossfaded in with no more xruns than the same server has playing alone."""

import json
import math
import time
import urllib.request

import numpy as np
import pytest
import soundfile as sf
import torch
from crashing import crashing_model
from jack import QUIET_SECONDS, allowed_xruns, jack_server, oscsend, quiet_baseline, stats
from streaming import CausalStack

from bendserver import switching
from bendserver.engine import StreamEngine
from bendserver.engine.node import Node
from bendserver.engine.rack import Edge, Rack
from bendserver.engine.tap import BlockTap
from bendserver.errors import BendingError
from bendserver.rackspec import RackSpec
from bendserver.serve import ServeOptions, Server

RATE, BLOCK = 48000, 256
FADE_MS = 20.0


def sine(blocks: int, hz: float = 220.0) -> np.ndarray:
    t = np.arange(blocks * BLOCK) / RATE
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)[None]


def blocks_of(audio: np.ndarray) -> list[np.ndarray]:
    return [audio[:, i : i + BLOCK] for i in range(0, audio.shape[1], BLOCK)]


def engine(seed: int, fuse: bool = True) -> StreamEngine:
    """A small streaming model (its weights from ``seed``), at the live tests' block."""
    torch.manual_seed(seed)
    return StreamEngine(CausalStack(), block=BLOCK, sample_rate=RATE, streams=1, fuse=fuse)


def node(seed: int) -> Node:
    """The node of :func:`engine` ``(seed)``."""
    torch.manual_seed(seed)
    return Node(CausalStack(), block=BLOCK, sample_rate=RATE, streams=1)


def largest_step(audio: np.ndarray) -> float:
    return float(np.abs(np.diff(audio, axis=-1)).max())


def test_a_swap_crossfades_from_a_block_boundary_and_steps_no_more_than_the_models():
    """Before the swap the rack plays the old model exactly; from the block after the swap was
    handed over, both on the same input, mixed by the equal-power curve over the fade; then the
    new model alone. The largest sample step over the switch is bounded by the
    models' own steps and the curve's slope; the blocks are counted once and timed as a sum."""
    audio = sine(40)
    swap_block, fade = 12, round(FADE_MS * RATE / 1000)
    alone_old, alone_new = engine(1, fuse=False), engine(2, fuse=False)
    old_out = np.concatenate([alone_old.process(b) for b in blocks_of(audio)], axis=1)
    new_out = np.concatenate(
        [alone_new.process(b) for b in blocks_of(audio)[swap_block:]], axis=1
    )  # a fresh node from the swap on, as the rack's (the rack's fuse acts on the mix)
    rack = engine(1, fuse=False)
    name = rack.order[0]
    incoming = node(2)
    out = []
    for index, block in enumerate(blocks_of(audio)):
        if index == swap_block:
            rack.swap(name, incoming, FADE_MS, rename="other")
            assert rack.busy and rack.node is not incoming
            with pytest.raises(BendingError, match="not playing yet"):
                rack.swap(name, node(3), FADE_MS)
        out.append(rack.process(block))
        assert rack.stats.blocks == index + 1, "a block of two nodes counts once"
    out = np.concatenate(out, axis=1)
    start = swap_block * BLOCK
    assert rack.swapped_at == start and start % BLOCK == 0
    assert rack.node is incoming and not rack.busy and rack.swaps == 1
    assert list(rack.nodes) == rack.order == ["other"] and rack.latency == incoming.latency
    assert rack.take_retired()[0] is not incoming and not rack.retired
    ramp = np.clip(np.arange(1, out.shape[1] - start + 1) / fade, 0, 1)
    mixed = old_out[:, start:] * np.cos(np.pi / 2 * ramp) + new_out * np.sin(np.pi / 2 * ramp)
    np.testing.assert_array_equal(out[:, :start], old_out[:, :start])
    np.testing.assert_allclose(out[:, start:], mixed, atol=1e-6)
    faded = math.ceil(fade / BLOCK) * BLOCK
    np.testing.assert_array_equal(out[:, start + faded :], new_out[:, faded:])
    around = slice(start - BLOCK, start + faded + BLOCK)
    own = max(largest_step(old_out[:, around]), largest_step(new_out[:, : faded + BLOCK]))
    peaks = np.abs(old_out).max() + np.abs(new_out).max()
    bound = math.sqrt(2) * own + np.pi / 2 / fade * peaks
    assert largest_step(out[:, around]) <= bound + 1e-6
    assert rack.stats.errors == 0 and incoming.time == out.shape[1]


def test_a_swap_without_a_fade_plays_the_new_node_from_the_next_block():
    rack = engine(1, fuse=False)
    first, incoming = rack.process(sine(1)), node(2)
    alone = engine(2, fuse=False)
    rack.swap(rack.order[0], incoming, 0.0)
    second = rack.process(sine(2)[:, BLOCK:])
    np.testing.assert_array_equal(second, alone.process(sine(2)[:, BLOCK:]))
    assert first.shape == second.shape and rack.node is incoming and rack.swapped_at == BLOCK


class Delayed(torch.nn.Module):
    """A model that delays its input by ``frames`` samples (its latency)."""

    def __init__(self, frames: int) -> None:
        super().__init__()
        self.frames = frames
        self.register_buffer("line", torch.zeros(1, 1, frames))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        both = torch.cat([self.line, x], dim=-1)
        self.line.copy_(both[..., -self.frames :])
        return both[..., : x.shape[-1]]


def delayed(frames: int) -> Node:
    return Node(Delayed(frames), block=BLOCK, sample_rate=RATE, streams=1)


def test_a_swap_in_a_rack_keeps_the_other_nodes_and_realigns_its_branches():
    """Two parallel branches (a node delaying by 37 samples beside a plain edge) meet at the
    output; swapping the node for one that delays by 300 leaves the other nodes as they are,
    and once the fade is over an impulse through the rack comes out as one impulse again, at
    the new latency. A node that does not fit its place is refused, naming both."""
    nodes = {"a": delayed(37), "b": delayed(1)}
    for item in nodes.values():
        item.model.latency = item.latency = int(item.model.module.frames)
    edges = [("in", "a"), ("a", "out"), ("in", "b"), ("b", "out")]
    rack = Rack(nodes, [Edge(*edge) for edge in edges], fuse=False)
    assert rack.latency == 37
    other = rack.nodes["b"]
    incoming = delayed(300)
    incoming.model.latency = incoming.latency = 300
    with pytest.raises(BendingError, match="fits its place"):
        rack.swap("a", Node(Delayed(5), block=2 * BLOCK, sample_rate=RATE, streams=1))
    rack.swap("a", incoming, 0.0)
    rack.process(np.zeros((1, BLOCK), np.float32))
    assert rack.nodes["a"] is incoming and rack.nodes["b"] is other and rack.latency == 300
    impulse = np.zeros((1, 4 * BLOCK), np.float32)
    impulse[0, 5] = 1.0
    out = np.concatenate([rack.process(b) for b in blocks_of(impulse)], axis=1)[0]
    assert np.flatnonzero(out).tolist() == [305] and out[305] == pytest.approx(2.0)


# -- /model/load on a live server ----------------------------------------------------------------


@pytest.fixture
def quick(monkeypatch):
    """Loads back to back, as soon as each is answered (a server lets one begin a second)."""
    monkeypatch.setattr(switching, "LOAD_INTERVAL", 0.0)


def bad_models(folder):
    """Models ``/model/load`` must refuse, each with a word of the reason it gives."""
    truncated = folder / "truncated.ts"
    torch.jit.script(torch.nn.Conv1d(1, 1, 1)).save(str(truncated))
    truncated.write_bytes(truncated.read_bytes()[:300])
    other_rate = crashing_model(folder / "rate")
    manifest = other_rate / "manifest.toml"
    manifest.write_text("sample_rate = 44100\n" + manifest.read_text())
    return [
        (str(folder / "no-such-model"), "no model at"),
        (str(other_rate), "runs at 44100 Hz; the rack plays 48000 Hz"),
        (str(truncated), "not a TorchScript file"),
        (str(crashing_model(folder / "aborts", top="os.abort()")), "killed by SIGABRT"),
        (str(crashing_model(folder / "nan", call="x = x * float('nan')")), "not finite"),
        (str(crashing_model(folder / "short", call="x = x[..., 1:]")), "[1, 1, 255]"),
    ]


def output_level(server: Server, seconds: float = 0.3) -> float:
    """The RMS of what the server played in the last ``seconds`` (a tap on its rack)."""
    if server.engine.tap is None:
        server.engine.tap = BlockTap(server.engine.in_channels, server.engine.out_channels)
        time.sleep(seconds + 0.05)
    tap = server.engine.tap
    _, out, _ = tap.read(tap.written - int(seconds * RATE))
    return float(np.sqrt(np.mean(out**2)))


def test_model_load_refuses_bad_models_and_switches_live_under_jack(tmp_path, replies, quick):
    """oscsend /model/load on a server playing drive through JACK's dummy driver at 256: each
    bad model is an /error naming the reason, drive plays on (output level checked) and the
    server answers; then wavae crossfades in: /model/loaded, at a block boundary, no xrun."""
    path = tmp_path / "sine.wav"
    sf.write(path, sine(RATE // BLOCK)[0], RATE)
    with jack_server(RATE, BLOCK):
        options = ServeOptions(
            model="drive", preset="none", audio="jack", block=BLOCK, input=str(path),
            osc_port=0, oscquery_port=0, reply_port=replies.port, xfade_ms=FADE_MS,
            allow_code_from=[str(tmp_path)],
        )  # fmt: skip
        with Server(options) as server:
            port = server.osc.port
            time.sleep(0.5)
            playing = output_level(server)
            assert playing > 0.05
            for source, reason in bad_models(tmp_path):
                oscsend(port, "/model/load", "s", source)
                address, message = replies.wait_for("/error", timeout=30)
                assert address == "/model/load" and reason in message, message
                oscsend(port, "/ping")
                assert replies.wait_for("/pong") == []
                assert server.engine.model.name == "drive"
                assert output_level(server, 0.1) == pytest.approx(playing, rel=0.2)
            server.controller.switcher.trust = True  # --trust-model: no probe, the warm-up sees
            oscsend(port, "/model/load", "s", str(tmp_path / "nan"))
            address, message = replies.wait_for("/error", timeout=30)
            assert "values that are not finite" in message and "blocks of the input" in message
            server.controller.switcher.trust = False
            before, quiet = quiet_baseline(port, replies)
            started, drive = time.monotonic(), server.engine.node
            weights = [*drive.model.module.parameters(), *drive.bended.weight_bank.slots.values()]
            oscsend(port, "/model/load", "s", "wavae")
            loaded = replies.wait_for("/model/loaded", timeout=30)
            time.sleep(0.3)
            after, seconds = stats(port, replies), time.monotonic() - started
            oscsend(port, "/get/engine/gain")
            assert replies.wait_for("/get/engine/gain") == [1.0]
    assert loaded[0] == "wavae" and loaded[1] == -1.0, "a shipped model is not probed"
    assert server.engine.model.name == "wavae" and server.engine.swaps == 1
    assert server.engine.swapped_at % BLOCK == 0 and list(server.engine.nodes) == ["wavae"]
    assert after["xruns"] - before["xruns"] <= allowed_xruns(quiet, QUIET_SECONDS, seconds)
    assert after["errors"] == 0
    assert output_level(server) > 0.01
    assert weights and all(w.numel() == 0 for w in weights), "drive's memory was freed"
    assert not vars(drive), "and its objects emptied: no reference cycle is left to collect"


def test_the_controller_oscquery_and_the_page_follow_the_new_model(replies):
    """drive (preset drive) -> wavae with its own preset: /list, /get, the OSCQuery namespace
    and the page's meters are the new model's; /stats counts on; drive's addresses are gone."""
    options = ServeOptions(
        model="drive", preset="drive", audio="null", block=BLOCK, osc_port=0,
        reply_port=replies.port, zeroconf=False,
    )  # fmt: skip
    with Server(options) as server:
        port, url = server.osc.port, server.oscquery.url
        time.sleep(0.2)
        blocks = stats(port, replies)["blocks"]
        oscsend(port, "/model/load", "s", "wavae")
        assert replies.wait_for("/model/loaded", timeout=60)[0] == "wavae"
        oscsend(port, "/list", "s", "bends")
        bends = replies.wait_for("/list/bends")
        oscsend(port, "/get/bend/lfo/depth")
        gone = replies.wait_for("/error")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # OSCQuery looks at the engine's state 10 times a second
            with urllib.request.urlopen(f"{url}/bend", timeout=5) as response:
                namespace = set(json.load(response)["CONTENTS"])
            if "latent" in namespace:
                break
            time.sleep(0.1)
        assert server.meters.engine is server.engine and stats(port, replies)["blocks"] > blocks
    assert sorted(bends) == ["/bend/latent/std", "/bend/mask/prob"]
    assert gone[0] == "/get/bend/lfo/depth" and "lfo" in gone[1]
    assert namespace == {"latent", "mask", "add", "remove", "clear"}


def test_a_node_of_a_served_rack_switches_live_under_jack(tmp_path, replies, quick):
    """A rack of drive -> drive_2 played through JACK at 256: /node/drive_2/load wavae swaps
    the second node alone (the first keeps its gain, the names stay), without an xrun; a model
    that does not fit the node's place, an unknown node and /model/load on a rack are /errors."""
    path = tmp_path / "sine.wav"
    sf.write(path, sine(RATE // BLOCK)[0], RATE)
    with jack_server(RATE, BLOCK):
        options = ServeOptions(
            preset="none", audio="jack", block=BLOCK, input=str(path), osc_port=0,
            oscquery_port=0, reply_port=replies.port, xfade_ms=FADE_MS,
            rack=RackSpec.chain(["drive", "drive"]),
        )  # fmt: skip
        with Server(options) as server:
            port = server.osc.port
            oscsend(port, "/drive/engine/gain", "f", 0.5)
            time.sleep(0.3)
            refused = []
            for address, source in [
                ("/node/drive_2/load", "wavae.encode"),
                ("/node/nothing/load", "wavae"),
                ("/model/load", "wavae"),
            ]:
                oscsend(port, address, "s", source)
                refused.append(replies.wait_for("/error", timeout=30))
            before, quiet = quiet_baseline(port, replies)
            started, first = time.monotonic(), server.engine.nodes["drive"]
            oscsend(port, "/node/drive_2/load", "s", "wavae")
            loaded = replies.wait_for("/node/loaded", timeout=30)
            time.sleep(0.3)
            after, seconds = stats(port, replies), time.monotonic() - started
            oscsend(port, "/drive/get/engine/gain")
            gain = replies.wait_for("/drive/get/engine/gain")
            assert output_level(server) > 0.01
    assert "fits its place" in refused[0][1] and "1 channel(s) of audio" in refused[0][1]
    assert "no rack node 'nothing'" in refused[1][1]
    assert "/<node>/load" in refused[2][1] and "drive, drive_2" in refused[2][1]
    assert loaded[:3] == ["drive_2", "wavae", -1.0] and gain == [0.5]
    rack = server.engine
    assert list(rack.nodes) == ["drive", "drive_2"] and rack.nodes["drive"] is first
    assert rack.nodes["drive_2"].model.name == "wavae" and rack.swapped_at % BLOCK == 0
    assert after["xruns"] - before["xruns"] <= allowed_xruns(quiet, QUIET_SECONDS, seconds)
    assert after["errors"] == 0
