"""Sweeps: the grid of settings rendered through the batch path, each cell as a score setting
it at 0 s would render it, a CSV of features, a contact sheet PNG and an HTML page."""

import csv
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from sounds import write_noise

import bendserver as tb
from bendserver.cli import main
from bendserver.render.sweep import cells, features, parse_vary


def test_a_sweep_writes_each_cell_a_table_and_a_contact_sheet(tmp_path):
    write_noise(tmp_path / "in.wav", seed=5)
    (tmp_path / "score.txt").write_text("0.25 /engine/gain 0.5\n")
    out = tmp_path / "grid"
    argv = ["sweep", str(tmp_path / "in.wav"), "-m", "drive", "-p", "drive", "-o", str(out)]
    argv += ["--vary", "mask.prob=0.5:1:2", "--vary", "noise.std=0,0.3", "--workers", "1"]
    assert main([*argv, "--score", str(tmp_path / "score.txt")]) == 0
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert [(r["mask.prob"], r["noise.std"]) for r in rows] == [
        ("0.5", "0"), ("0.5", "0.3"), ("1", "0"), ("1", "0.3"),
    ]  # fmt: skip
    assert rows[2]["file"] == "in_mask.prob_1_noise.std_0.wav"
    # a cell is the render whose score sets its values at 0 s (then the --score's events)
    (tmp_path / "cell.txt").write_text(
        "0 /bend/mask/prob 1\n0 /bend/noise/std 0\n0.25 /engine/gain 0.5\n"
    )
    command = ["render", str(tmp_path / "in.wav"), "-m", "drive", "-p", "drive"]
    command += ["--score", str(tmp_path / "cell.txt"), "-o", str(tmp_path / "c.wav")]
    assert main(command) == 0
    cell = out / rows[2]["file"]
    assert cell.read_bytes() == (tmp_path / "c.wav").read_bytes()
    measured = features(cell, tmp_path / "in.wav")
    audio = sf.read(str(cell), dtype="float32")[0]
    assert float(rows[2]["peak"]) == pytest.approx(np.abs(audio).max(), rel=1e-5)
    assert float(rows[2]["rms"]) == pytest.approx(measured["rms"], rel=1e-5)
    assert float(rows[0]["distance_db"]) != float(rows[2]["distance_db"]), "the cells differ"
    png = (out / "contact.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    page = (out / "index.html").read_text()
    assert "mask.prob" in page and "noise.std 0.3" in page
    for row in rows:
        assert f'src="{row["file"]}"' in page
        assert (out / "index_cells" / f"{Path(row['file']).stem}.png").is_file()


def test_features_of_a_dry_render_are_those_of_the_input(tmp_path):
    write_noise(tmp_path / "in.wav", seed=5)
    measured = features(tmp_path / "in.wav", tmp_path / "in.wav")
    assert measured["distance_db"] == 0.0
    assert measured["rms"] == pytest.approx(0.3, rel=0.02)
    assert 10000 < measured["centroid_hz"] < 14000, "white noise: near a quarter of the rate"


@pytest.mark.parametrize(
    "text, message",
    [
        ("mask.prob", "op.param=START:STOP:COUNT"),
        ("prob=0,1", "op.param=START:STOP:COUNT"),
        ("mask.prob=0:1", "START:STOP:COUNT"),
        ("mask.prob=0:1:2.5", "START:STOP:COUNT"),
        ("mask.prob=0,x", "numbers separated by commas"),
        ("/nowhere=1", "--vary /nowhere"),
    ],
)
def test_a_bad_vary_says_how_to_write_it(text, message):
    with pytest.raises(tb.BendingError, match=message):
        parse_vary(text)


def test_vary_values_and_the_grid():
    assert parse_vary("mask.prob=0:1:5").values == (0.0, 0.25, 0.5, 0.75, 1.0)
    assert parse_vary("/engine/gain=0.5,1").address == "/engine/gain"
    grid = cells([parse_vary("a.x=1,2"), parse_vary("b.y=3,4,5")])
    assert len(grid) == 6 and grid[1] == (("a.x", 1.0), ("b.y", 4.0))
    with pytest.raises(tb.BendingError, match="twice"):
        cells([parse_vary("a.x=1"), parse_vary("a.x=2")])


def test_a_cell_that_names_no_op_of_the_model_is_an_error(tmp_path, capsys):
    write_noise(tmp_path / "in.wav", seed=5)
    argv = ["sweep", str(tmp_path / "in.wav"), "-m", "drive", "-o", str(tmp_path / "o")]
    assert main([*argv, "--vary", "nothing.prob=0,1", "--workers", "1"]) == 2
    assert "--vary nothing.prob" in capsys.readouterr().err
    assert not list((tmp_path / "o").glob("*.wav"))
