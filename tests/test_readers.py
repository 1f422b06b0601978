"""Strict readers: scores, presets and manifests accept only what the docs say (UTF-8, finite
decimal numbers, values of the right type, bounded size and nesting) and name the line or key
that is wrong."""

import json
import shutil

import numpy as np
import pytest
import soundfile as sf

import bendserver as tb
from bendserver.cli import main
from bendserver.loader import load_model
from bendserver.presets.library import read_preset
from bendserver.readers import MAX_DEPTH, parse_json
from bendserver.render.offline import parse_score


@pytest.mark.parametrize(
    "line, message",
    [
        ("nan /engine/gain 0.5", "'nan' is not a time"),
        ("inf /engine/gain 0.5", "'inf' is not a time"),
        ("0_5 /engine/gain 0.5", "'0_5' is not a time"),
        ("1e999 /engine/gain 0.5", "'1e999' is not a time"),
        ("0x10 /engine/gain 0.5", "'0x10' is not a time"),
        ("1 /preset/load 'unclosed", "No closing quotation"),
    ],
)
def test_a_score_time_is_a_finite_decimal(line, message):
    with pytest.raises(tb.BendingError, match=f"moves.txt:2: {message}"):
        parse_score(f"0 /ping\n{line}\n", "moves.txt")


def test_score_arguments_that_are_not_decimals_stay_words():
    (event,) = parse_score("1.5e0 /bend/g/value nan 0_5 -2 .5")
    assert event.time == 1.5 and event.args == ("nan", "0_5", -2.0, 0.5)


def test_a_score_that_is_not_utf8_is_named(tmp_path, capsys):
    (tmp_path / "moves.txt").write_bytes(b"0 /engine/gain 0.5\n1 /preset/load caf\xe9\n")
    sf.write(str(tmp_path / "in.wav"), np.zeros(480, np.float32), 48000)
    argv = ["render", str(tmp_path / "in.wav"), "--score", str(tmp_path / "moves.txt"), "-o",
            str(tmp_path / "x.wav")]  # fmt: skip
    assert main(argv) == 2
    assert "moves.txt is not UTF-8 text (line 2" in capsys.readouterr().err


PRESET = {
    "format": "bendserver.config",
    "version": 1,
    "ops": {"g": {"op": "Scale", "params": {"value": 0.5}}},
    "bends": [{"op": "g", "keys": ["gain"]}],
    "weights": {"version": None, "interpolation": None},
    "engine": {"gain": 1.0, "mix": 1.0},
}


def _with(path: str, value):
    """The preset with the value at a dotted ``path`` replaced."""
    data = json.loads(json.dumps(PRESET))
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    return data


@pytest.mark.parametrize(
    "data, message",
    [
        (_with("engine.gain", "loud"), "engine.gain is a finite number, got 'loud'"),
        (_with("engine.mix", True), "engine.mix is a finite number, got True"),
        (_with("engine.gian", 1.0), r"engine: unknown key\(s\) \['gian'\]"),
        (_with("weights.version", 3), "weights.version is a string, got 3"),
        (_with("weights.interpolation", {"a": "b"}), "weights.interpolation.a is a finite"),
        (_with("ops", [1]), "ops is an object"),
        (_with("ops.g.params.value", "0.5"), "ops.g.params.value is a finite number"),
        (_with("ops.g.op", 7), "ops.g.op is a string, got 7"),
        (_with("ops.g.options", {"seed": "x"}), "ops.g.options.seed is a whole number"),
        (_with("bends.0.keys", "gain"), r"bends\[0\].keys is a list"),
        (_with("bends.0.keys", [1]), r"bends\[0\].keys is a string, got 1"),
        (_with("bends", {"op": "g"}), "bends is a list"),
        (_with("disabled", [None]), r"disabled\[0\] is a string"),
        (_with("model", ["drive"]), "model is a string"),
        ({**PRESET, "engin": {}}, r"unknown key\(s\) \['engin'\]"),
        ([PRESET], "the file is an object"),
    ],
)
def test_a_preset_value_of_the_wrong_type_names_its_key(tmp_path, data, message):
    (tmp_path / "p.json").write_text(json.dumps(data))
    with pytest.raises(tb.BendingError, match=f"preset p.json: {message}"):
        read_preset(tmp_path / "p.json")


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"engine": {"gain": NaN}}', "NaN is not a finite number"),
        ('{"engine": {"gain": -Infinity}}', "-Infinity is not a finite number"),
        ('{"engine": {"gain": 1e999}}', "1e999 is not a finite decimal"),
        ('{"engine": {"gain": 1}, "engine": {}}', "key 'engine' appears twice"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested more than"),
        ("[" * 100_000 + "]" * 100_000, "nested more than"),
        ('{"ops": ' + "1" * 5000 + "}", "digits"),
    ],
)
def test_preset_json_is_finite_unique_and_shallow(tmp_path, text, message):
    (tmp_path / "p.json").write_text(text)
    with pytest.raises(tb.BendingError, match=f"preset p.json.*{message}"):
        read_preset(tmp_path / "p.json")


def test_a_preset_that_is_not_utf8_is_named(tmp_path):
    (tmp_path / "p.json").write_bytes(b'{"model": "caf\xe9"}')
    with pytest.raises(tb.BendingError, match="preset .*p.json is not UTF-8 text"):
        read_preset(tmp_path / "p.json")


def test_parse_json_keeps_what_is_valid():
    assert parse_json('{"a": [1, 2.5e-3, "x", null, true]}', "t") == {
        "a": [1, 0.0025, "x", None, True]
    }


@pytest.mark.parametrize(
    "line, message",
    [
        ("sample_rate = nan", "nan is not a finite decimal"),
        ("sample_rate = inf", "inf is not a finite decimal"),
        ("latency = 1_0.5", "1_0.5 is not a finite decimal"),
        ('block = "big"', "block is a whole number, got 'big'"),
        ("block = 0", "block is at least 1, got 0"),
        ("latency = -1", "latency is at least 0"),
        ("preset = 3", "preset is a string, got 3"),
        ('class = "model.py"', "class is 'file.py:ClassName'"),
        ("[versions]\ndefault = 1", "versions.default is a string, got 1"),
        ("[methods.forward]\nin_ratio = 0.5", "methods.forward.in_ratio is a whole number"),
    ],
)
def test_a_manifest_value_names_its_key(tmp_path, line, message):
    folder = tmp_path / "drive"
    shutil.copytree(load_model("drive").path, folder)
    manifest = (folder / "manifest.toml").read_text()
    key = line.split()[0]
    if key.startswith("["):  # replace the table
        table = key.strip("[]")
        start = manifest.index(f"[{table}]")
        end = manifest.find("\n[", start + 1)
        manifest = manifest[:start] + line + "\n" + (manifest[end:] if end != -1 else "")
    else:
        lines = [x for x in manifest.splitlines() if not x.startswith(f"{key} =")]
        manifest = line + "\n" + "\n".join(lines) + "\n"
    (folder / "manifest.toml").write_text(manifest)
    with pytest.raises(tb.BendingError, match=f"manifest.toml: {message}"):
        load_model(folder)
