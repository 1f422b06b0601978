"""Switching models live: the slot's crossfade at a block boundary, and ``/model/load`` on a
server playing through a dummy JACK server, sent with ``oscsend``: bad models answered with
``/error`` while the old model plays on, a good one crossfaded in without an xrun."""

import json
import math
import time
import urllib.request

import numpy as np
import pytest
import soundfile as sf
import torch
from crashing import crashing_model
from jack import jack_server, oscsend, stats
from streaming import CausalStack

from bendserver.engine import StreamEngine
from bendserver.engine.switch import EngineSlot
from bendserver.serve import ServeOptions, Server

RATE, BLOCK = 48000, 256
FADE_MS = 20.0


def sine(blocks: int, hz: float = 220.0) -> np.ndarray:
    t = np.arange(blocks * BLOCK) / RATE
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)[None]


def blocks_of(audio: np.ndarray) -> list[np.ndarray]:
    return [audio[:, i : i + BLOCK] for i in range(0, audio.shape[1], BLOCK)]


def engine(seed: int) -> StreamEngine:
    """A small streaming model (its weights from ``seed``), at the live tests' block."""
    torch.manual_seed(seed)
    return StreamEngine(CausalStack(), block=BLOCK, sample_rate=RATE, streams=1)


def largest_step(audio: np.ndarray) -> float:
    return float(np.abs(np.diff(audio, axis=-1)).max())


def test_a_swap_crossfades_from_a_block_boundary_and_steps_no_more_than_the_models():
    """Before the swap the slot plays the old model exactly; from the block after the swap was
    handed over, both on the same input, mixed by the equal-power curve over the fade; then the
    new model alone. The largest sample step over the switch is bounded by the
    models' own steps and the curve's slope; the blocks are counted once and timed as a sum."""
    audio = sine(40)
    swap_block, fade = 12, round(FADE_MS * RATE / 1000)
    alone_old, alone_new = engine(1), engine(2)
    old_out = np.concatenate([alone_old.process(b) for b in blocks_of(audio)], axis=1)
    new_out = np.concatenate(
        [alone_new.process(b) for b in blocks_of(audio)[swap_block:]], axis=1
    )  # a fresh engine from the swap on, as the slot's
    slot = EngineSlot(engine(1), FADE_MS)
    incoming = engine(2)
    out = []
    for index, block in enumerate(blocks_of(audio)):
        if index == swap_block:
            slot.swap(incoming)
            assert slot.busy and slot.engine is not incoming
        out.append(slot.process(block))
        assert slot.stats.blocks == index + 1, "a block of two engines counts once"
    out = np.concatenate(out, axis=1)
    start = swap_block * BLOCK
    assert slot.swapped_at == start and start % BLOCK == 0
    assert slot.engine is incoming and not slot.busy and slot.swaps == 1
    assert slot.take_retired()[0] is not incoming and not slot.retired
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
    assert slot.stats.errors == 0 and incoming.time == out.shape[1]


def test_a_swap_without_a_fade_plays_the_new_engine_from_the_next_block():
    slot = EngineSlot(engine(1), 0.0)
    first, incoming = slot.process(sine(1)), engine(2)
    alone = engine(2)
    slot.swap(incoming)
    second = slot.process(sine(2)[:, BLOCK:])
    np.testing.assert_array_equal(second, alone.process(sine(2)[:, BLOCK:]))
    assert first.shape == second.shape and slot.engine is incoming and slot.swapped_at == BLOCK


# -- /model/load on a live server ----------------------------------------------------------------


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
        (str(other_rate), "runs at 44100 Hz; the server plays 48000 Hz"),
        (str(truncated), "not a TorchScript file"),
        (str(crashing_model(folder / "aborts", top="os.abort()")), "killed by SIGABRT"),
        (str(crashing_model(folder / "nan", call="x = x * float('nan')")), "not finite"),
        (str(crashing_model(folder / "short", call="x = x[..., 1:]")), "[1, 1, 255]"),
    ]


def output_level(server: Server, seconds: float = 0.3) -> float:
    """The RMS of what the server played in the last ``seconds`` (its slot's recent blocks)."""
    recent = server.slot.recent
    _, out, _ = recent.read(recent.written - int(seconds * RATE))
    return float(np.sqrt(np.mean(out**2)))


def test_model_load_refuses_bad_models_and_switches_live_under_jack(tmp_path, replies):
    """oscsend /model/load on a server playing drive through JACK's dummy driver at 256: each
    bad model is an /error naming the reason, drive plays on (output level checked) and the
    server answers; then wavae crossfades in: /model/loaded, at a block boundary, no xrun."""
    path = tmp_path / "sine.wav"
    sf.write(path, sine(RATE // BLOCK)[0], RATE)
    with jack_server(RATE, BLOCK):
        options = ServeOptions(
            model="drive", preset="none", audio="jack", block=BLOCK, input=str(path),
            osc_port=0, oscquery_port=0, reply_port=replies.port, xfade_ms=FADE_MS,
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
            before, drive = stats(port, replies), server.engine
            oscsend(port, "/model/load", "s", "wavae")
            loaded = replies.wait_for("/model/loaded", timeout=30)
            time.sleep(0.3)
            after = stats(port, replies)
            oscsend(port, "/get/engine/gain")
            assert replies.wait_for("/get/engine/gain") == [1.0]
    assert loaded[0] == "wavae" and loaded[1] == -1.0, "a shipped model is not probed"
    assert server.engine.model.name == "wavae" and server.slot.swaps == 1
    assert server.slot.swapped_at % BLOCK == 0
    assert after["xruns"] - before["xruns"] == 0 and after["errors"] == 0
    assert output_level(server) > 0.01
    weights = [*drive.model.module.parameters(), *drive.bended.weight_bank.slots.values()]
    assert weights and all(w.numel() == 0 for w in weights), "drive's memory was freed"


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
