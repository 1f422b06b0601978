"""One bending state: changes prepared from the pending state, applied in sample-time order,
whatever order they were sent in; the audio side only applies; a bounded queue."""

import itertools

import numpy as np
import pytest
import soundfile as sf
import torch
from streaming import CausalStack, Identity, twin

import bendserver as tb
from bendserver.control import Controller
from bendserver.render.offline import parse_score, render_file

BLOCK = 256
BLOCKS = 6


def _engine(module=None, **kwargs):
    """An engine on ``module``, or on a CausalStack with a second weight version 'other'."""
    engine = tb.StreamEngine(
        module or twin(CausalStack)[0], block=BLOCK, sample_rate=48000, fuse=False, **kwargs
    )
    if module is None:
        other = CausalStack()
        torch.nn.init.normal_(other.first.conv.weight)
        engine.bended.create_version("other", dict(other.named_parameters()))
    return engine


def _preset():
    config = tb.BendingConfig((tb.Scale(2.0), r"first\.conv\.weight"), (tb.Scale(0.5), "act"))
    config.names = {"w": config.entries[0][0], "a": config.entries[1][0]}
    return tb.Preset("mine", config.to_dict(), version="other", gain=0.5)


#: The changes of the pairs test: each a function of (engine, at).
CHANGES = {
    "weight": lambda engine, at: engine.set_param("w", "value", 0.25, at=at),
    "interp": lambda engine, at: engine.set_interpolation({"_default": 1, "other": 3}, at=at),
    "version": lambda engine, at: engine.set_version("other", at=at),
    "enable": lambda engine, at: engine.enable_op("w", False, at=at),
    "preset": lambda engine, at: engine.load_preset(_preset(), at=at),
}


def _prepared():
    engine = _engine()
    engine.add_op("w", tb.Scale(1.5), r"first\.conv\.weight")
    engine.add_op("a", tb.Scale(0.8), "act")
    return engine


def _run(engine, signal):
    return [engine.process(b) for b in np.split(signal, BLOCKS, axis=-1)]


@pytest.mark.parametrize("first, second", list(itertools.permutations(CHANGES, 2)))
def test_every_pair_of_changes_in_any_order_equals_the_final_state(first, second):
    signal = np.random.default_rng(4).standard_normal((1, BLOCK * BLOCKS)).astype(np.float32)
    for times in [(BLOCK, BLOCK), (BLOCK, 2 * BLOCK), (2 * BLOCK, BLOCK)]:
        engine = _prepared()
        engine.process(np.zeros((1, BLOCK), np.float32))
        at = {first: engine.time + times[0], second: engine.time + times[1]}
        for name in (first, second):  # sent in this order, scheduled at their own times
            CHANGES[name](engine, at[name])
        got = _run(engine, signal)
        # The reference: the same changes applied from the start, in sample-time order.
        reference = _prepared()
        reference.process(np.zeros((1, BLOCK), np.float32))
        for name in sorted((first, second), key=lambda n: at[n]):  # stable: sent order on ties
            CHANGES[name](reference, None)
        want = _run(reference, signal)
        for index in range(3, BLOCKS):  # once both applied and a block of history has passed
            np.testing.assert_allclose(got[index], want[index], atol=1e-6, err_msg=f"{times}")
        assert engine.state == engine.applied_state, "everything sent has applied"


def test_a_change_sent_for_an_earlier_time_is_not_undone_by_a_later_one():
    engine = _prepared()
    ones = np.ones((1, BLOCK), np.float32)
    engine.set_interpolation({"_default": 1, "other": 1}, at=4 * BLOCK)  # sent first, later
    engine.set_param("w", "value", 0.0, at=2 * BLOCK)  # sent second, earlier
    out = [engine.process(ones) for _ in range(6)]
    reference = _prepared()  # the final state, reached in an order that cannot lose anything
    reference.set_interpolation({"_default": 1, "other": 1})
    reference.set_param("w", "value", 0.0)
    reference.process(ones)
    np.testing.assert_allclose(out[-1], reference.process(ones), atol=1e-6)


def test_a_change_that_would_break_a_scheduled_one_is_refused_and_changes_nothing():
    engine = _prepared()
    engine.set_param("w", "value", 0.5, at=10 * BLOCK)
    before = engine.state
    with pytest.raises(tb.BendingError, match="would break 'set w.value'"):
        engine.remove_op("w")
    assert engine.state == before


def test_the_score_of_the_interp_report(tmp_path):
    """An /interp to the mix the preset has leaves a weight-op change made before it."""
    score = [
        r"0.0 /bend/add w Scale decoder\.blocks\.0\..*weight value 1.0",
        "1.0 /bend/w/value 0.0",
    ]
    demo, rate = sf.read(str(tb.load_model("wavae").demo), dtype="float32")
    start = tmp_path / "start.wav"  # the demo's first 3 s: the score's changes and a second after
    sf.write(str(start), demo[: 3 * rate], rate)
    levels = {}
    for name, lines in [
        ("without", score),
        ("with", [*score, "2.0 /interp strings 0.5 percussion 0.5"]),
    ]:
        engine = tb.StreamEngine("wavae", preset="wavae")
        out = tmp_path / f"{name}.wav"
        render_file(engine, start, out, parse_score("\n".join(lines)))
        audio, rate = sf.read(str(out), dtype="float32")
        levels[name] = audio[int(2.1 * rate) :]
    np.testing.assert_allclose(levels["with"], levels["without"], atol=1e-6)
    assert np.sqrt(np.mean(levels["with"] ** 2)) < 0.01, "the decoder's first block stays muted"


def test_get_answers_the_playing_value_and_the_op_api_goes_through_the_engine():
    engine = _engine(Identity())
    engine.add_op("g", tb.Scale(1.0), "gain")
    control = Controller(engine)
    ones = np.ones((1, BLOCK), np.float32)
    engine.process(ones)
    engine.op("g").value = 0.25  # the Python API: a change like any other
    assert control.dispatch("/get/bend/g/value") == [("/get/bend/g/value", [1.0])]
    assert float(engine.op("g").value_tensor("value")) == 1.0, "applied at the next block"
    assert engine.process(ones)[0, 0] == 0.25
    assert control.dispatch("/get/bend/g/value") == [("/get/bend/g/value", [0.25])]


def test_the_audio_side_hands_back_what_it_replaces():
    engine = _prepared()
    block = np.zeros((1, BLOCK), np.float32)
    engine.process(block)
    engine.collect()
    slot = engine.bended.weight_bank.slots["first.conv.weight"]
    old_pointer = slot.data_ptr()
    engine.set_param("w", "value", 3.0)
    engine.add_op("b", tb.Bias(0.1), "act")
    engine.process(block)
    released = list(engine.commands.released)
    replaced = [item for command in released for item in command.payload.replaced]
    assert any(isinstance(t, torch.Tensor) and t.data_ptr() == old_pointer for t in replaced)
    assert any(callable(item) for item in replaced), "the old graph module comes back too"
    del released, replaced
    engine.collect()
    assert not engine.commands.released, "the control side drops them"


def test_the_timeline_takes_a_score_of_any_length():
    """Only what a live client schedules ahead is bounded (per client, in the controller); the
    engine's timeline takes every change given to it (render plays scores of any length)."""
    engine = _engine()
    engine.add_op("w", tb.Scale(1.0), r"first\.conv\.weight")
    engine.process(np.zeros((1, BLOCK), np.float32))
    for step in range(1100):
        engine.set_param("w", "value", step / 1000, at=BLOCK * (step + 2))
    engine.set_param("w", "value", 0.5)  # for now: before all of them
    assert engine.applied_state.op("w").param("value") == 1.0
    engine.process(np.zeros((1, BLOCK), np.float32))
    assert engine.applied_state.op("w").param("value") == 0.5
    assert engine.state.op("w").param("value") == 1.099


def test_the_engine_leaves_torch_threads_alone():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _engine()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize(
    "address",
    [
        "/_init__",
        "/__init__",
        "/_bend",
        "/bends",
        "/dispatch",
        "/engine/__dict__",
        "/bend/__class__/value",
        "/bend/_x/enable",
        "/get/__dict__",
        "/presets/load",
        "/",
    ],
)
def test_private_looking_addresses_are_refused_and_the_controller_keeps_working(address):
    engine = _engine(Identity())
    control = Controller(engine)
    with pytest.raises(tb.BendingError):
        control.dispatch(address, [])
    assert control.dispatch("/get/engine/gain") == [("/get/engine/gain", [1.0])]
    assert control.dispatch("/stats")[0][0] == "/stats"
