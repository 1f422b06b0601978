"""Nothing lost: every file is written beside its destination and renamed into place, so an
interrupted render or recording leaves the old file or nothing; an output that is one of the
inputs is rendered safely or refused; an unwritable output is a clear error."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from sounds import write_noise
from streaming import Identity

import bendserver as tb
from bendserver.audio import Recorder
from bendserver.cli import main
from bendserver.files import write_text, writing
from bendserver.presets.library import Preset, PresetLibrary
from bendserver.render.offline import render_file

ROOT = Path(__file__).resolve().parent.parent
SLOW = f"{Path(__file__).parent / 'streaming.py'}:Slow"
IDENTITY = f"{Path(__file__).parent / 'streaming.py'}:Identity"


def _interrupt_render(folder: Path, output: str, sig: int) -> subprocess.CompletedProcess:
    """Start ``bendserver render long.wav -o OUTPUT --force`` (a model taking 20 ms a block),
    and send ``sig`` once it has begun writing (a file in the folder is new or changed)."""
    command = [sys.executable, "-m", "bendserver.cli", "render", "long.wav", "-m", SLOW,
               "--block", "1024", "-o", output, "--force"]  # fmt: skip
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    process = subprocess.Popen(
        command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the render never began writing"
            time.sleep(0.02)
        time.sleep(0.5)  # a few dozen blocks into the render (it takes about 4 s)
        assert process.poll() is None, "the render ended before it could be interrupted"
        process.send_signal(sig)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    return subprocess.CompletedProcess(command, process.returncode, out, err)


# the command turns SIGTERM into Ctrl-C's KeyboardInterrupt: SIGINT takes the same path after it
@pytest.mark.parametrize(
    "sig",
    [pytest.param(signal.SIGINT, marks=pytest.mark.slow), signal.SIGTERM],
    ids=["SIGINT", "SIGTERM"],
)
def test_an_interrupted_render_into_its_input_leaves_it_and_no_partial_output(tmp_path, sig):
    """``bendserver render long.wav -o long.wav --force`` and Ctrl-C (or a SIGTERM): the input
    as it was (the render wrote over it while reading it), nothing else in the folder."""
    write_noise(tmp_path / "long.wav", seconds=4.0)
    original = (tmp_path / "long.wav").read_bytes()
    result = _interrupt_render(tmp_path, "long.wav", sig)
    assert result.returncode == 130, result.stderr
    assert "interrupted" in result.stderr and "nothing was written" in result.stderr
    assert (tmp_path / "long.wav").read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.wav"]


def test_an_interrupted_render_into_a_new_file_leaves_nothing(tmp_path):
    """Interrupted at its 50th block (as Ctrl-C does): no partial file that looks finished."""
    write_noise(tmp_path / "in.wav", seconds=1.0)
    engine = tb.StreamEngine(Identity(), block=256, fuse=False)
    original = engine.process
    calls = {"n": 0}

    def interrupting(block):
        calls["n"] += 1
        if calls["n"] == 50:
            raise KeyboardInterrupt
        return original(block)

    engine.process = interrupting
    with pytest.raises(KeyboardInterrupt):
        render_file(engine, tmp_path / "in.wav", tmp_path / "out.wav")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav"]


@pytest.mark.parametrize("spelling", ["same", "dotdot", "hardlink"])
def test_a_render_into_its_own_input_reads_it_whole_first(tmp_path, spelling):
    audio = write_noise(tmp_path / "song.wav")
    output = {
        "same": tmp_path / "song.wav",
        "dotdot": tmp_path / "x" / ".." / "song.wav",
        "hardlink": tmp_path / "hard.wav",
    }[spelling]
    (tmp_path / "x").mkdir()
    if spelling == "hardlink":
        os.link(tmp_path / "song.wav", output)
    engine = tb.StreamEngine(Identity(), block=256, fuse=False)
    engine.add_op("half", tb.Scale(0.5), "gain")
    render_file(engine, output, output, force=True)
    rendered, _ = sf.read(str(output), dtype="float32")
    np.testing.assert_array_equal(rendered, audio[0] * 0.5)  # whole, as it was before the render
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_no_write_follows_a_symbolic_link_at_its_place(tmp_path):
    """The finding: a link planted at an output's, a manifest's or a preset's place had the
    write land at its target. Each write now refuses a link at its own place, target kept."""
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me")
    link = tmp_path / "out.wav"
    link.symlink_to(target)
    engine = tb.StreamEngine(Identity(), block=256, fuse=False)
    write_noise(tmp_path / "in.wav")
    refusal = rf"out.wav is a symbolic link \(to {target}\): bendserver does not write through"
    with pytest.raises(tb.BendingError, match=refusal):
        render_file(engine, tmp_path / "in.wav", link, force=True)
    with pytest.raises(tb.BendingError, match="is a symbolic link"):
        write_text(link, "text")
    preset = tmp_path / "presets" / "mine.json"
    preset.parent.mkdir()
    preset.symlink_to(target)
    with pytest.raises(tb.BendingError, match="mine.json is a symbolic link"):
        PresetLibrary(preset.parent).save(Preset("mine"), overwrite=True)
    with pytest.raises(tb.BendingError, match="is a symbolic link"):
        Recorder(link, 48000, 1, 256, force=True)
    assert target.read_text() == "keep me" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "elsewhere.txt",
        "in.wav",
        "out.wav",
        "presets",
    ], "no temporary file left"


def test_a_stop_while_a_file_is_put_in_place_leaves_no_temporary_file(tmp_path, monkeypatch):
    """The finding: an interrupted render left '..f0.bendserver-pending.<hex>.partial.wav'
    (a stop while the complete file was flushed to the disk, before its rename)."""

    def stopped(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", stopped)
    with pytest.raises(KeyboardInterrupt):
        write_text(tmp_path / "a.txt", "x")
    assert list(tmp_path.iterdir()) == []


def test_an_output_that_is_another_input_is_refused(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    (tmp_path / "out").mkdir()
    write_noise(tmp_path / "src" / "a.wav")
    write_noise(tmp_path / "src" / "b.wav", seed=4)
    original = (tmp_path / "src" / "b.wav").read_bytes()
    os.link(tmp_path / "src" / "b.wav", tmp_path / "out" / "a.wav")  # (a symbolic one: refused)
    argv = ["render", str(tmp_path / "src"), "-m", IDENTITY, "-o", str(tmp_path / "out"), "--force"]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "is the input" in error and "b.wav" in error
    assert (tmp_path / "src" / "b.wav").read_bytes() == original
    assert not (tmp_path / "out" / "b.wav").exists(), "refused before anything is rendered"


def test_an_unwritable_output_is_a_clear_error(tmp_path, capsys):
    write_noise(tmp_path / "in.wav")
    (tmp_path / "file").write_text("not a folder")
    argv = ["render", str(tmp_path / "in.wav"), "-m", IDENTITY, "-o", str(tmp_path / "file/x.wav")]
    assert main(argv) == 2
    assert "cannot write" in capsys.readouterr().err


def test_a_recording_appears_only_when_closed(tmp_path):
    path = tmp_path / "take.wav"
    recorder = Recorder(path, 48000, 1, 256)
    block = np.full((1, 256), 0.25, np.float32)
    for _ in range(40):
        recorder.push(block)
    time.sleep(0.1)  # the writer thread has written into its file
    assert not path.exists()
    recorder.close()
    audio, rate = sf.read(str(path), dtype="float32")
    assert rate == 48000 and len(audio) == 40 * 256 and np.all(audio == 0.25)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["take.wav"]


def test_an_interrupted_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    with pytest.raises(KeyboardInterrupt), writing(path) as temp:
        temp.write_text("half of the n")
        raise KeyboardInterrupt
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    write_text(path, "new")
    assert path.read_text() == "new" and (path.stat().st_mode & 0o777) == 0o640


def test_presets_and_configs_are_replaced_whole(tmp_path):
    library = PresetLibrary(user=tmp_path)
    library.save(Preset("mine", gain=0.5))
    library.save(Preset("mine", gain=0.25), overwrite=True)
    assert json.loads((tmp_path / "mine.json").read_text())["engine"]["gain"] == 0.25
    config = tb.BendingConfig((tb.Scale(2.0), "x"))
    config.save(tmp_path / "config.json")
    assert tb.BendingConfig.load(tmp_path / "config.json") == config
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "mine.json"]
    (tmp_path / ".mine.0a1b2c3d.partial.json").write_text('{"engi')  # a save cut by a crash
    assert "mine" in library.names() and not any(n.startswith(".") for n in library.names())
