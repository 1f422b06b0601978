"""The probe names every way a model's own code can fail before a command loads it: an exit of its
own (0 included), a hang (stopped after the probe's timeout, the model never imported by the
command), memory past the child's address-space limit, and a command killed while it probes
(its child dies with it). Models are real model folders whose code does each."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from crashing import crashing_model
from jack import oscsend

from bendserver import probe
from bendserver.cli import main
from bendserver.errors import BendingError, ModelCrashed
from bendserver.probe import probe_model
from bendserver.serve import ServeOptions, Server

#: Model code that notes the process importing it (its pid, one line each) in a file.
NOTE = "open({marker!r}, 'a').write(f'{{os.getpid()}}\\n')"


def noted(folder: Path, **code: str) -> tuple[Path, Path]:
    """A model folder that notes its importers in ``folder/imported``, then runs ``code``."""
    marker = folder.parent / f"{folder.name}.imported"
    top = NOTE.format(marker=str(marker)) + "\n" + code.pop("top", "")
    return crashing_model(folder, top=top, **code), marker


def importers(marker: Path) -> list[int]:
    return [int(line) for line in marker.read_text().split()] if marker.exists() else []


def test_a_model_that_exits_0_is_named_by_info_and_render_and_never_loaded(tmp_path, capsys):
    """The finding: ``os._exit(0)`` in model.py: the probe took exit 0 for success, then the
    command's own load ended it: info and render printed nothing and exited 0."""
    model, marker = noted(tmp_path / "exits", top="os._exit(0)")
    source = tmp_path / "in.wav"
    source.write_bytes(b"")
    for argv in (["info", str(model)], ["render", str(source), "-m", str(model), "-o", "x.wav"]):
        assert main(argv) == 2, argv
        assert capsys.readouterr().err == (
            f"bendserver: model '{model}': the process running it exited with code 0 while "
            f"loading it. That is the model's own code ({model}), not bendserver: fix or replace "
            "the model (nothing was loaded)\n"
        )
    assert os.getpid() not in importers(marker) and len(importers(marker)) == 2


def test_an_exit_at_the_first_call_names_its_code_and_step(tmp_path):
    model, _ = noted(tmp_path / "exits", call="raise SystemExit(3)")
    with pytest.raises(ModelCrashed, match=r"exited with code 3 at the first call of forward\(\)"):
        probe_model(str(model))


def test_a_model_that_hangs_is_stopped_and_the_command_never_imports_it(
    tmp_path, monkeypatch, capsys
):
    """The finding: ``while True: pass`` at import: the probe gave up after 120 s and the
    command then imported the model itself, for good."""
    monkeypatch.setattr(probe, "PROBE_SECONDS", 1.0)
    model, marker = noted(tmp_path / "hangs", top="while True: pass")
    started = time.monotonic()
    assert main(["info", str(model)]) == 2
    assert time.monotonic() - started < 10
    assert capsys.readouterr().err == (
        f"bendserver: model '{model}': loading it and calling it once took longer than 1 s in a "
        "child process, which was stopped while loading it; nothing was loaded (a model that "
        "needs longer loads with --trust-model)\n"
    )
    assert importers(marker) and os.getpid() not in importers(marker)


def test_a_model_past_the_memory_limit_is_refused_whatever_the_command(tmp_path, monkeypatch):
    """A model asking for 20 GiB at import was stopped only by an outside limit: the child's
    address space now grows by PROBE_MEMORY (and twice the model's files) at most, and a model
    that asks for more is refused before the command loads it (allocation refused, no memory
    used)."""
    monkeypatch.setattr(probe, "PROBE_MEMORY", 2**30)
    model, marker = noted(tmp_path / "greedy", top="big = torch.empty(2**33, dtype=torch.uint8)")
    with pytest.raises(BendingError) as refused:
        probe_model(str(model))
    assert str(refused.value).startswith(
        f"model '{model}' needed more than the 1.0 GiB of memory a probe gives while loading it ("
    )
    assert "can't allocate memory" in str(refused.value) and "nothing was loaded" in str(
        refused.value
    )
    assert os.getpid() not in importers(marker)
    fits, _ = noted(tmp_path / "fits", top="big = torch.empty(2**28, dtype=torch.uint8)")
    assert probe_model(str(fits)), "a model within the limit loads"


PROBING = textwrap.dedent(
    """
    import sys
    from bendserver.probe import probe_model
    probe_model(sys.argv[1])
    """
)


def state(pid: int) -> str | None:
    """A process's state letter (Z: ended, waiting to be reaped), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_command_killed_while_it_probes_leaves_no_child_running(tmp_path):
    """The finding: SIGKILL during a probe left the child running (97 % CPU, holding the
    server's ports)."""
    model, marker = noted(tmp_path / "hangs", top="while True: pass")
    command = subprocess.Popen([sys.executable, "-c", PROBING, str(model)])
    try:
        deadline = time.monotonic() + 60
        while not importers(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        (child,) = importers(marker)
        assert state(child) == "R"
        command.send_signal(signal.SIGKILL)
        command.wait(10)
        deadline = time.monotonic() + 5
        while state(child) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert state(child) in (None, "Z"), "the probe's child died with the command"
    finally:
        command.kill()


def test_a_live_load_of_a_model_that_exits_0_is_an_error_and_the_server_plays_on(tmp_path, replies):
    """The finding: /model/load of it ended the server with no reply and no log line."""
    model, _ = noted(tmp_path / "exits", top="os._exit(0)")
    options = ServeOptions(
        model="drive", preset="none", audio="null", block=256, osc_port=0, oscquery_port=0,
        reply_port=replies.port, allow_code_from=[str(tmp_path)],
    )  # fmt: skip
    with Server(options) as server:
        oscsend(server.osc.port, "/model/load", "s", str(model))
        address, message = replies.wait_for("/error", timeout=60)
        oscsend(server.osc.port, "/ping")
        assert replies.wait_for("/pong") == []
        assert server.engine.model.name == "drive"
    assert address == "/model/load" and "exited with code 0 while loading it" in message
