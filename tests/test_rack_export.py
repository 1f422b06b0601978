"""``bendserver export`` of a rack: one nn~ file that loads with torch alone, plays like the live
rack block by block (edges, gains, aligned branches), and whose attributes reach each node."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from test_channels import _delay_model
from test_export import run_without_bendserver, signal
from test_torchscript import nn_tilde_file

import bendserver as tb
from bendserver.cli import main
from bendserver.export.rack import export_rack
from bendserver.presets.library import Preset
from bendserver.rackspec import EdgeSpec, NodeSpec, RackSpec

BLOCK = 64
#: At block 3, the drive node's mask and noise, set in the file and on the live node.
CHANGES = {3: [("drive_mask", "prob", 0.2), ("drive_noise", "std", 0.5)]}


def rack_outputs(rack, blocks, changes):
    """The live rack, block by block; a change ``(<node>_<op>, param, value)`` goes to that
    node's op."""
    outputs = []
    for index, block in enumerate(blocks):
        for attribute, name, value in changes.get(index, []):
            node, op_id = attribute.split("_", 1)
            rack.nodes[node].set_param(op_id, name, value)
        outputs.append(rack.process(block))
    return outputs


def file_outputs(path, blocks):
    module = torch.jit.load(str(path))
    with torch.no_grad():
        return [module(torch.from_numpy(block)[None])[0].numpy() for block in blocks]


def assert_close(got, want):
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"block {index}")


def test_a_chain_exported_plays_like_the_live_rack_in_a_process_without_bendserver(tmp_path):
    spec = RackSpec.chain(["drive", "wavae"])
    path = tmp_path / "chain.ts"
    attributes = export_rack(spec, path, block=BLOCK)
    assert attributes == ["drive_mask_prob", "drive_lfo_depth", "drive_lfo_freq",
                          "drive_noise_std", "wavae_latent_std", "wavae_mask_prob"]  # fmt: skip
    blocks = signal(1, BLOCK, 8)
    report, got = run_without_bendserver(path, blocks, CHANGES, tmp_path)
    assert report["methods"] == ["forward"] and report["params"] == [1, 1, 1, 1]
    assert report["attributes"] == attributes and report["sr"] == 48000
    assert report["got"] == pytest.approx([0.2, 0.5])
    # the live rack without its output fuse: the file holds the models, not the host's fuse
    assert_close(got, rack_outputs(spec.build(block=BLOCK, fuse=False), blocks, CHANGES))
    unchanged = file_outputs(path, blocks)
    assert_close(got[:3], unchanged[:3])
    for index in range(3, 8):  # the drive node's attributes changed what the chain plays
        assert np.abs(got[index] - unchanged[index]).max() > 1e-3


def test_the_shipped_rack_exported_from_the_command_plays_like_its_live_rack(tmp_path, capsys):
    path = tmp_path / "rack.ts"
    assert main(["export", "--rack", "wavae_drive", "--block", str(BLOCK), "-o", str(path)]) == 0
    assert "drive_mask_prob" in capsys.readouterr().out
    blocks = signal(1, BLOCK, 6, seed=1)
    rack = RackSpec.find("wavae_drive").build(block=BLOCK, fuse=False)
    assert_close(file_outputs(path, blocks), rack_outputs(rack, blocks, {}))


def test_branches_of_different_latency_are_aligned_in_the_file_as_in_the_live_rack(tmp_path):
    """A branch 100 samples late (more than a block) beside drive: the file delays drive's
    branch by a line of its own, as the live rack does; bendserver measures the file's latency
    at load as the rack's, and plays it. Drive's preset gain and dry/wet mix are played after it."""
    late = _delay_model(tmp_path / "late")
    nodes = (NodeSpec("late", str(late)), NodeSpec("dry", "drive", preset="none"))
    edges = (EdgeSpec("in", "late"), EdgeSpec("in", "dry"),
             EdgeSpec("late", "out", 0.25), EdgeSpec("dry", "out", 0.5))  # fmt: skip
    spec = RackSpec(nodes, edges)
    path = tmp_path / "aligned.ts"
    soft = Preset(name="soft", gain=0.5, mix=0.25)
    export_rack(spec, path, block=64, presets={"dry": soft})
    rack = spec.build(block=64, fuse=False)
    rack.nodes["dry"].load_preset(soft)
    rack.process(np.zeros((1, 64), np.float32))  # the live node ramps to a new gain and mix
    rack.reset_state()  # over its first block; the file starts there
    assert rack.latency == 100
    impulse = np.zeros((1, 64), np.float32)
    impulse[0, 10] = 1.0
    blocks = [impulse, *signal(1, 64, 5), impulse]
    got = file_outputs(path, blocks)
    assert_close(got, rack_outputs(rack, blocks, {}))
    engine = tb.StreamEngine(path, fuse=False)  # bendserver plays the file as a model too
    assert (engine.block, engine.model.latency, engine.model.latency_source) == (
        64,
        100,
        "measured at load",
    )
    assert_close([engine.process(block) for block in blocks], got)


def test_a_named_edge_is_exported_with_the_ops_on_its_latent(tmp_path):
    nodes = (NodeSpec("enc", "wavae", "encode"), NodeSpec("dec", "wavae", "decode"))
    edges = (EdgeSpec("in", "enc"), EdgeSpec("enc", "dec", name="z"), EdgeSpec("dec", "out"))
    spec = RackSpec(nodes, edges)
    scale = tb.Scale(0.5)
    config = tb.BendingConfig((scale, "latent"), names={"half": scale})
    half = Preset(name="half", config=config.to_dict())
    path = tmp_path / "latent.ts"
    assert export_rack(spec, path, block=BLOCK, presets={"z": half}) == ["z_half_value"]
    rack = spec.build(block=BLOCK, fuse=False)
    rack.nodes["z"].add_op("half", tb.Scale(0.5), "latent")
    blocks = signal(1, BLOCK, 4, seed=2)
    assert_close(file_outputs(path, blocks), rack_outputs(rack, blocks, {}))
    with pytest.raises(tb.BendingError, match=r"no node 'y' to give a preset: .*'z'"):
        export_rack(spec, path, block=BLOCK, presets={"y": half})


def test_a_file_whose_method_does_not_convert_is_held_as_it_is(tmp_path):
    """A .ts node that plays as a direct scripted call (a forked task), then a converted one."""
    forked = nn_tilde_file(tmp_path, seed=1, name="forked.ts", fork=True)
    plain = nn_tilde_file(tmp_path, seed=2, name="plain.ts")
    spec = RackSpec.chain([str(forked), str(plain)])
    path = tmp_path / "voices.ts"
    export_rack(spec, path, block=BLOCK)
    module = torch.jit.load(str(path))
    assert module.sr == 44100 and "fork" in module.node_0.model.code  # held as it was
    blocks = signal(1, BLOCK, 4, seed=3)
    assert_close(
        file_outputs(path, blocks), rack_outputs(spec.build(BLOCK, fuse=False), blocks, {})
    )


RAVE = Path(os.environ.get("BENDSERVER_RAVE_DIR", "/nonexistent")) / "rave_causal_streaming.ts"


@pytest.mark.skipif(
    not RAVE.is_file(), reason="BENDSERVER_RAVE_DIR holds no rave_causal_streaming.ts"
)
def test_a_rave_encode_into_its_decode_exported_plays_like_the_live_rack(tmp_path):
    """RAVE's decoder draws noise from torch's generator: each block under the same seed."""
    spec = RackSpec.chain([f"{RAVE}:encode", f"{RAVE}:decode"])
    path = tmp_path / "rave.ts"
    export_rack(spec, path, block=2048)
    rack = spec.build(block=2048, fuse=False)
    module = torch.jit.load(str(path))
    for index, block in enumerate(signal(1, 2048, 3)):
        torch.manual_seed(index)
        want = rack.process(block)
        torch.manual_seed(index)
        with torch.no_grad():
            got = module(torch.from_numpy(block)[None])[0].numpy()
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=f"block {index}")


def test_a_failing_export_refuses_clearly_and_keeps_the_file_there(tmp_path, capsys):
    path = tmp_path / "chain.ts"
    path.write_bytes(b"the previous export")
    assert main(["export", "--rack", "no_such_rack", "--force", "-o", str(path)]) == 2
    assert "no rack file no_such_rack" in capsys.readouterr().err
    command = ["export", "-m", "drive", "-m", "no_such_model", "--force", "-o", str(path)]
    assert main(command) == 2
    assert "no_such_model" in capsys.readouterr().err
    with pytest.raises(tb.BendingError, match="wavae.*multiples of 32"):
        export_rack(RackSpec.chain(["drive", "wavae"]), path, block=100)
    twins = RackSpec((NodeSpec("d-1", "drive"), NodeSpec("d_1", "drive")))  # refused late
    with pytest.raises(tb.BendingError, match=r"attributes \['d_1_lfo_depth'.* given twice"):
        export_rack(twins, path, block=BLOCK)
    assert path.read_bytes() == b"the previous export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.ts"]  # nothing left beside
