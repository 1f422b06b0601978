"""Memory that a client controls stays bounded: commands replaced before they apply leave the
audio side, and the OSC intake keeps no per-sender or per-size state past its bounds."""

import numpy as np
from streaming import CausalStack, twin

import bendserver as tb

BLOCK = 256


def test_commands_replaced_before_they_apply_do_not_pile_up_until_their_time():
    engine = tb.StreamEngine(twin(CausalStack)[0], block=BLOCK, sample_rate=48000, fuse=False)
    engine.add_op("w", tb.Scale(1.0), r"first\.conv\.weight")
    hour = engine.time + engine.samples(3600)
    scheduled = 16
    for k in range(scheduled):  # an hour ahead: each change for now re-plans all of them
        engine.set_param("w", "value", 2.0, at=hour + k)
    block = np.zeros((1, BLOCK), np.float32)
    most = 0
    for step in range(150):
        engine.set_param("w", "value", 2.0 if step % 2 else 0.5)
        engine.process(block)
        most = max(most, engine.commands.pending())
    assert most <= 2 * scheduled + 70, f"{most} commands held for {scheduled} scheduled"
    engine.collect()
    assert len(engine.timeline.entries) == scheduled
    assert engine.state.op("w").param("value") == 2.0
