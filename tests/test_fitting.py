"""The presets that fit (``/list fitting``, what the page's preset menus offer): each file read,
and checked against each model, once until it is written again, so that a page rebuilt at every
change reads nothing, however large the presets the user's folder holds."""

import json

import pytest
from test_hostile_control import big_preset

import bendserver as tb
from bendserver.control import Controller
from bendserver.loader import DEFAULT_MODEL
from bendserver.presets import fit
from bendserver.presets.library import PresetLibrary


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """A controller of the default model over the user's folder ``tmp_path``, with the files
    of that folder read and the presets checked, counted by name."""
    engine = tb.StreamEngine(DEFAULT_MODEL, preset=None)
    (node,) = engine.nodes.values()  # what a preset loads into
    reads, checks = [], []
    read, check = fit.read_preset, node.check_preset

    def counted_read(path):
        if path.parent == tmp_path:
            reads.append(path.stem)
        return read(path)

    def counted_check(preset):
        checks.append(preset.name)
        return check(preset)

    monkeypatch.setattr(fit, "read_preset", counted_read)
    monkeypatch.setattr(node, "check_preset", counted_check)
    return Controller(engine, presets=PresetLibrary(tmp_path)), reads, checks


def write(folder, preset):
    (folder / f"{preset.name}.json").write_text(json.dumps(preset.to_dict()), encoding="utf-8")


def listed(ctl):
    return ctl.dispatch("/list", ["fitting"])[0][1]


def test_each_preset_is_read_and_checked_once_until_it_is_written_again(counted, tmp_path):
    ctl, reads, checks = counted
    write(tmp_path, big_preset(1000))
    elsewhere = big_preset(1)
    elsewhere.config["bends"][0]["keys"] = ["no_such_layer"]
    write(tmp_path, elsewhere)
    assert "big1000" in listed(ctl) and "big1" not in listed(ctl)  # the shipped "drive" too
    for _ in range(3):  # what a page's rebuilds ask
        assert {"big1000", "drive"} <= set(listed(ctl))
    assert sorted(reads) == ["big1", "big1000"], "each file read once"
    assert checks.count("big1000") == 1 and checks.count("big1") == 1, "and checked once"

    write(tmp_path, _renamed(10, "big1000"))
    assert "big1000" in listed(ctl) and reads.count("big1000") == 2, "written again: read again"
    assert checks.count("big1000") == 2
    (tmp_path / "big1000.json").unlink()
    assert "big1000" not in listed(ctl) and reads.count("big1000") == 2


def _renamed(count, name):
    preset = big_preset(count)
    preset.name = name
    return preset
