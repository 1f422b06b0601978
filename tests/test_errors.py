"""Messages, not tracebacks: every error reaches the user as one line (the command line and the
OSC edge), and a model whose own code kills its process is named by info, render and serve."""

import json
import logging
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import soundfile as sf
import torch
from crashing import crashing_model
from streaming import Identity

import bendserver as tb
from bendserver.cli import info, main
from bendserver.control import Controller
from bendserver.osc import ControlWorker, Incoming
from bendserver.presets.library import PresetLibrary


def one_line(err: str) -> str:
    """The single line a command wrote to stderr (asserting there is one, and no traceback)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("bendserver: "), lines[0]
    return lines[0]


@pytest.fixture
def sound(tmp_path):
    path = tmp_path / "in.wav"
    sf.write(path, np.zeros(4800, np.float32), 48000)
    return path


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 1, 3, padding=1)
        self.register_buffer("forward_params", torch.tensor([1, 1, 1, 1]))

    @torch.jit.export
    def get_methods(self) -> list[str]:
        return ["forward"]

    def forward(self, x, y):
        return self.conv(x) + y


@pytest.mark.parametrize("command", ["info", "render", "serve"])
def test_a_ts_whose_forward_takes_two_tensors_is_refused_in_one_line(
    command, tmp_path, sound, capsys
):
    model = tmp_path / "two.ts"
    torch.jit.script(TwoInputs()).save(str(model))
    argv = {
        "info": ["info", str(model)],
        "render": ["render", str(sound), "-m", str(model), "-o", str(tmp_path / "out.wav")],
        "serve": ["serve", "-m", str(model), "--audio", "null", "--osc-port", "0",
                  "--oscquery-port", "0", "--duration", "0.1"],
    }[command]  # fmt: skip
    assert main(argv) == 2
    line = one_line(capsys.readouterr().err)
    assert "forward() takes 2 inputs (x, y)" in line and "default values" in line
    assert not (tmp_path / "out.wav").exists()


@pytest.mark.parametrize("output", ["/proc/x.wav", "{tmp}/in.wav/x.wav"])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(
    output, tmp_path, sound, capsys
):
    output = output.format(tmp=tmp_path)
    assert main(["render", str(sound), "-o", output]) == 2
    assert f"cannot write {output}" in one_line(capsys.readouterr().err)
    serve = ["serve", "--audio", "null", "--osc-port", "0", "--duration", "0.1"]
    assert main([*serve, "--record", output]) == 2
    assert "choose a place you can write to" in one_line(capsys.readouterr().err)


def test_a_score_that_is_not_utf8_is_named_with_its_byte(tmp_path, sound, capsys):
    score = tmp_path / "moves.txt"
    score.write_bytes(b"0 /engine/gain 0.5 # caf\xe9\n")
    assert main(["render", str(sound), "--score", str(score), "-o", str(tmp_path / "o.wav")]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"score {score} is not UTF-8 text (line 1, byte 24)" in line
    assert not (tmp_path / "o.wav").exists()


def test_a_preset_value_of_the_wrong_type_is_one_line(tmp_path, sound, capsys):
    preset = PresetLibrary().load("drive").to_dict()
    preset["engine"]["gain"] = "loud"
    (tmp_path / "p.json").write_text(json.dumps(preset))
    argv = ["render", str(sound), "-p", str(tmp_path / "p.json"), "-o", str(tmp_path / "o.wav")]
    assert main(argv) in (1, 2)
    assert "loud" in one_line(capsys.readouterr().err)


def test_a_bug_is_one_line_with_a_hint_and_debug_shows_its_traceback(monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("the cache\nwas empty")

    monkeypatch.setattr(info, "run", broken)
    assert main(["info"]) == 1
    line = one_line(capsys.readouterr().err)
    assert line == (
        "bendserver: internal error, a bug in bendserver: RuntimeError: the cache was empty; "
        "rerun with --debug for the traceback"
    )
    with pytest.raises(RuntimeError, match="the cache"):
        main(["info", "--debug"])


class Replies:
    def __init__(self):
        self.log = []

    def send(self, host, address, args=()):
        self.log.append((address, list(args)))


def test_an_unexpected_error_in_a_handler_is_one_error_reply_and_one_log_line(monkeypatch, caplog):
    engine = tb.StreamEngine(Identity(), block=256, fuse=False)
    engine.add_op("g", tb.Scale(value=1.0), "gain")

    def broken(*args, **kwargs):
        raise RuntimeError("gain table\nnot ready")

    monkeypatch.setattr(engine, "set_param", broken)
    replies = Replies()
    worker = ControlWorker(Controller(engine), replies)
    worker.start()
    try:
        worker.submit(Incoming("/bend/g/value", (0.5,)), "127.0.0.1")
        worker.submit(Incoming("/ping", ()), "127.0.0.1")
        deadline = time.monotonic() + 5
        while len(replies.log) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        worker.stop()
    assert replies.log == [
        (
            "/error",
            [
                "/bend/g/value",
                "internal error, a bug in bendserver: RuntimeError: gain table not ready",
            ],
        ),
        ("/pong", []),
    ], "answered in one line, and the server went on"
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert logged == [f"/bend/g/value: {replies.log[0][1][1]}"]


# -- a model whose own code kills its process ---------------------------------------------------

#: Runs the commands in one interpreter (one torch import): each prints its exit code and the
#: stderr (a line ``result [code, err]``). A command killed by its model ends the whole run.
DRIVER = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from bendserver.cli import main
    for argv in json.loads(sys.argv[1]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(argv)
        print("result", json.dumps([code, err.getvalue()]), flush=True)
    """
)


def test_info_render_and_serve_name_a_model_whose_code_kills_its_process(tmp_path, sound):
    aborts = crashing_model(tmp_path / "aborts", top="os.abort()")
    segfaults = crashing_model(tmp_path / "segfaults", call="ctypes.string_at(0)")
    fine = crashing_model(tmp_path / "fine")
    out = str(tmp_path / "out.wav")
    serve = ["--audio", "null", "--osc-port", "0", "--oscquery-port", "0", "--duration", "0.1"]
    runs = [
        (["info", str(model)], ["render", str(sound), "-m", str(model), "-o", out],
         ["serve", "-m", str(model), *serve])
        for model in (aborts, segfaults)
    ]  # fmt: skip
    argvs = [argv for triple in runs for argv in triple] + [["info", str(fine)]]
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    results = [json.loads(line[7:]) for line in done.stdout.splitlines() if line[:7] == "result "]
    assert done.returncode == 0 and len(results) == len(argvs), (
        f"the commands died with {done.returncode} after {len(results)} of {len(argvs)}: "
        f"{done.stderr[-800:]}"
    )
    for (code, err), argv in zip(results[:3], argvs[:3], strict=True):
        assert code == 2, argv
        assert one_line(err) == (
            f"bendserver: model '{aborts}': the process running it was killed by SIGABRT "
            "(signal 6, exit code 134) while loading it in model.py line 4 (<module>). That "
            f"is the model's own code ({aborts}), not bendserver: fix or replace the model "
            "(nothing was loaded)"
        ), argv
    for (code, err), argv in zip(results[3:6], argvs[3:6], strict=True):
        assert code == 2, argv
        line = one_line(err)
        assert "killed by SIGSEGV (signal 11, exit code 139) at the first call of forward() in " \
               "model.py line 12 (forward)" in line, argv  # fmt: skip
        assert f"the model's own code ({segfaults}), not bendserver" in line
    assert results[6][0] == 0, "a model that does not crash is loaded as before"
    assert not (tmp_path / "out.wav").exists()


class _Scripted(torch.nn.Module):
    """The smallest nn~ file: one method, its parameters as a buffer."""

    def __init__(self, gain: float = 1.0) -> None:
        super().__init__()
        self.gain = gain
        self.register_buffer("forward_params", torch.tensor([1, 1, 1, 1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain


def test_a_torchscript_file_the_probe_passed_is_not_probed_again(tmp_path, monkeypatch):
    """A .ts file holds all its code: once the probe passed it (by digest, with this torch),
    the next command loads it without the child's load and call (longer than importing torch
    for a RAVE export); another block, another file, or a file the probe refused is probed
    again."""
    from bendserver.probe import probe_model

    monkeypatch.setenv("BENDSERVER_HOME", str(tmp_path / "home"))
    path = tmp_path / "m.ts"
    torch.jit.script(_Scripted()).save(str(path))
    assert probe_model(str(path), check=True) is True
    assert probe_model(str(path), check=True) is False, "passed before: kept"
    assert probe_model(str(path), block=512) is True, "another block"
    torch.jit.script(_Scripted(2.0)).save(str(path))
    assert probe_model(str(path)) is True, "written again"
    truncated = tmp_path / "truncated.ts"
    truncated.write_bytes(path.read_bytes()[:200])
    for _ in range(2):
        with pytest.raises(tb.BendingError, match="nothing was loaded"):
            probe_model(str(truncated), check=True)


def test_a_render_names_every_file_it_lacks_at_once(tmp_path, monkeypatch, capsys):
    """The README's example, copied without its files, named the score alone; the input on the
    next try."""
    monkeypatch.chdir(tmp_path)
    for command in (["render", "song.wav", "-o", "out.wav"], ["sweep", "song.wav", "--vary",
                    "mask.prob=0,1", "-o", "out"]):  # fmt: skip
        assert main([*command, "-m", "drive", "--score", "moves.txt"]) == 2
        assert one_line(capsys.readouterr().err) == (
            "bendserver: no input file song.wav, no score file moves.txt"
        )
