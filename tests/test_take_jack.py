"""A take played live under JACK (dummy driver, 48 kHz / 256 frames), moved by oscsend, a
JACK MIDI port and two modulators, recorded as audio and as a score: the score rendered offline
over the same input gives the recording sample for sample."""

import subprocess
import time

import mido
import numpy as np
import pytest
import soundfile as sf
from jack import free_port, jack_server, live_model, need, oscsend

from bendserver.audiofile import read_sound
from bendserver.play import PlayOptions
from bendserver.render.offline import ScorePlayer, read_score
from bendserver.serve import ServeOptions, Server

RATE, BLOCK = 48000, 256


@pytest.fixture(scope="module")
def jack():
    need("jack_connect")
    with jack_server(RATE, BLOCK) as name:
        yield name


def bursts(path, seconds: float = 1.0) -> None:
    """Noise in loud and quiet stretches (a follower and onsets have something to hear)."""
    rng = np.random.default_rng(5)
    frames = int(RATE * seconds)
    level = np.repeat(rng.uniform(0.0, 0.6, frames // 2400 + 1), 2400)[:frames]
    sf.write(path, (rng.standard_normal(frames) * level).astype(np.float32), RATE)


def without_replayed_silence(played: np.ndarray, computed: int) -> np.ndarray:
    """The recording without the silence a stream re-armed after an underrun plays again
    (recorded to keep time with what was heard, never computed by the engine): whole blocks
    of zeros, as many as the recording holds beyond the blocks computed (the model's output
    of this input is never a block of exact zeros)."""
    blocks = played.reshape(-1, BLOCK)
    silent = ~blocks.any(axis=1)
    assert silent.sum() * BLOCK == played.shape[0] - computed, "only replayed silence is extra"
    return blocks[~silent].reshape(-1, 1)


def test_a_take_with_osc_midi_and_modulators_renders_again_sample_for_sample(
    jack, replies, tmp_path
):
    model, preset = live_model()
    if preset == "none":
        pytest.skip("the shipped drive model (and its preset) are not in this checkout")
    source, recording, score = tmp_path / "in.wav", tmp_path / "take.wav", tmp_path / "take.txt"
    bursts(source)
    backend = mido.Backend("mido.backends.rtmidi/UNIX_JACK")
    options = ServeOptions(
        model=model, preset=preset, audio="jack", block=BLOCK, osc_port=free_port(),
        reply_port=replies.port, oscquery_port=0, midi="", input=str(source),
        record=str(recording), record_score=str(score),
    )  # fmt: skip
    with backend.open_output("out", virtual=True, client_name="taker") as out:
        with Server(options) as server:
            subprocess.run(
                ["jack_connect", "-s", jack, "taker:out", "bendserver:midi_in"],
                check=True,
                timeout=10,
            )
            port = server.osc.port
            for message in (
                ("/mod/add", "sssf", "wob", "lfo", "rate", 3.0),
                ("/mod/wob/route", "sf", "/bend/lfo/depth", 0.2),
                ("/mod/add", "sssf", "hit", "envelope", "onset", 0.5),
                ("/mod/hit/route", "sfff", "/engine/gain", 0.2, 0.0, 4.0),
                ("/midi/map", "ssii", "/mod/hit/trigger", "note", 1, 60),
            ):
                oscsend(port, message[0], *message[1:])
                time.sleep(0.05)
            for _ in range(4):
                out.send(mido.Message("note_on", note=60, velocity=100))
                time.sleep(0.15)
                oscsend(port, "/bend/lfo/freq", "ff", 0.0002, 30.0)
                time.sleep(0.15)
                oscsend(port, "/engine/mix", "f", 0.7)
            time.sleep(0.3)
            stats = server.stats()
    computed = server.engine.time - server.controller.recorder.start
    assert stats["midi"] == 4 and stats.get("errors", 0) == 0
    played, rate = sf.read(str(recording), dtype="float32", always_2d=True)
    assert rate == RATE and played.shape[0] >= computed > 1.5 * RATE
    played = without_replayed_silence(played, computed)
    text = score.read_text()
    assert text.count("/mod/hit/trigger 1.0") == 4 and text.count("/bend/lfo/freq 0.0001") == 4
    engine, _ = PlayOptions(model=model, preset=preset, block=BLOCK).build()  # as render does
    looped = read_sound(source)[0]
    x = np.tile(looped, (1, -(-played.shape[0] // looped.shape[1])))[:, : played.shape[0]]
    player = ScorePlayer(engine, read_score(score))  # after the server's warm-up, as live
    blocks = []
    for start in range(0, x.shape[1], BLOCK):
        player.until(engine.time)
        blocks.append(engine.process(np.ascontiguousarray(x[:, start : start + BLOCK])))
    rendered = np.concatenate(blocks, axis=1).T
    print(f"\ntake: {played.shape[0] / RATE:.2f} s, {text.count(chr(10)) - 2} changes")
    assert np.abs(rendered).max() > 0.01
    np.testing.assert_array_equal(rendered, played)


def test_the_stress_command_plays_four_modulators_on_eight_routes(capsys):
    from bendserver.cli import main

    need("jackd")
    code = main(["stress", "--block", "256", "--load", "0", "--seconds", "1", "--modulators"])
    assert code == 0
    table = capsys.readouterr().out
    assert "+ 4 modulators, 8 routes" in table
