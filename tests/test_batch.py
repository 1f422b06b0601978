"""Rendering many files: worker processes give the bytes of a sequential render, each file is
rendered as if alone, the manifest skips what was made the same way, an interrupted render
resumes with only the missing files, Ray actors give the same bytes."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import soundfile as sf
import torch
from sounds import write_noise

from bendserver.cli import main
from bendserver.passes import convolution
from bendserver.render.manifest import MANIFEST
from bendserver.render.worker import Job, Recipe, Worker

SLOW = f"{Path(__file__).parent / 'streaming.py'}:Slow"
NOISY = f"{Path(__file__).parent / 'streaming.py'}:Noisy"


def _folder(path: Path, count: int, seconds: float = 0.5, stereo: bool = True) -> Path:
    """``count`` files of noise, the second in stereo if ``stereo``."""
    path.mkdir()
    for index in range(count):
        channels = 2 if stereo and index == 1 else 1
        write_noise(path / f"f{index}.wav", seconds, channels=channels, seed=index)
    return path


def _render(source, output, *options) -> int:
    return main(["render", str(source), "-m", "drive", "-p", "drive", "-o", str(output), *options])


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_two_workers_write_the_bytes_of_a_sequential_render(tmp_path):
    """Mono and stereo files through drive's preset (a mask, an LFO, noise on a weight)."""
    source = _folder(tmp_path / "in", 4)
    assert _render(source, tmp_path / "one", "--workers", "1") == 0
    assert _render(source, tmp_path / "two", "--workers", "2") == 0
    one, two = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert sorted(one) == [MANIFEST, "f0.wav", "f1.wav", "f2.wav", "f3.wav"]
    for name in one:
        if name != MANIFEST:
            assert one[name] == two[name], name
    assert sf.info(str(tmp_path / "two" / "f1.wav")).channels == 2


def test_beside_another_thread_the_pool_is_spawned_and_writes_the_same_bytes(tmp_path, monkeypatch):
    """A process is forked only while no other thread runs in the command (one could hold a
    lock the child then never sees released): beside one the pool is spawned, loads the model
    itself and takes the forms it is handed."""
    source = _folder(tmp_path / "in", 3)
    assert _render(source, tmp_path / "one", "--workers", "1") == 0
    methods = []
    get_context = multiprocessing.get_context
    monkeypatch.setattr(
        multiprocessing, "get_context", lambda method: methods.append(method) or get_context(method)
    )
    stop = threading.Event()
    beside = threading.Thread(target=stop.wait)
    beside.start()
    try:
        assert _render(source, tmp_path / "two", "--workers", "2") == 0
    finally:
        stop.set()
        beside.join()
    assert methods == ["spawn"]
    one, two = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert all(one[name] == two[name] for name in one if name != MANIFEST)


def test_a_worker_renders_each_file_as_if_it_were_alone(tmp_path):
    """A model reused for a second file keeps the first one's streaming state in its buffers
    (drive's cached convolutions): each file starts from a fresh copy of the loaded model."""
    source = _folder(tmp_path / "in", 3, stereo=False)
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "f2.wav").symlink_to(source / "f2.wav")
    assert _render(source, tmp_path / "all", "--workers", "1") == 0
    assert _render(tmp_path / "alone", tmp_path / "one", "--workers", "1") == 0
    after_others = (tmp_path / "all" / "f2.wav").read_bytes()
    assert after_others == (tmp_path / "one" / "f2.wav").read_bytes()


def test_a_pool_process_takes_the_next_file_while_the_command_renders(tmp_path, capsys):
    """A model taking 20 ms a block, one long file among short ones: the pool process renders
    the long one while the command's own process renders the short ones (a pool process was
    handed a file only between two of the command's own, which rendered the long one itself
    before the last short one)."""
    source = tmp_path / "in"
    source.mkdir()
    for index in range(3):
        write_noise(source / f"f{index}.wav", 1.0 if index == 2 else 0.05, seed=index)
    argv = ["render", str(source), "-m", SLOW, "--block", "1024", "--trust-model"]
    assert main([*argv, "-o", str(tmp_path / "out"), "--workers", "2"]) == 0
    wrote = [line.split()[1] for line in capsys.readouterr().out.splitlines()]
    assert sorted(wrote) == [str(tmp_path / "out" / f"f{i}.wav") for i in range(3)]
    assert wrote[-1].endswith("f2.wav"), wrote


def test_a_model_that_fails_to_load_in_a_pool_is_one_error(tmp_path):
    """Loaded in the pool's initializer, a failing model would start process after process."""
    source = _folder(tmp_path / "in", 2, stereo=False)
    argv = ["render", str(source), "-m", "no_such_model", "--trust-model", "--workers", "2"]
    result = subprocess.run(
        [sys.executable, "-m", "bendserver.cli", *argv, "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "no_such_model" in result.stderr and "Traceback" not in result.stderr
    assert not list((tmp_path / "out").glob("*.wav"))


def test_a_model_that_draws_noise_renders_the_same_bytes_after_anything(tmp_path):
    """torch seeds each process at random: every file starts from the run's seed instead, so
    a model drawing noise renders a file alike in any worker, after any other file."""
    source = _folder(tmp_path / "in", 2)
    worker = Worker(Recipe(model=NOISY))
    renders = []
    for seed, name in ((None, "f0.wav"), (None, "f1.wav"), (0, "f0.wav"), (1, "f0.wav")):
        if seed is not None:  # as another process: another state of torch's generator
            torch.seed()
            worker = Worker(Recipe(model=NOISY, seed=seed))
        into = tmp_path / f"{len(renders)}.wav"
        worker.render(Job(str(source / name), str(into)), [], into)
        renders.append(into.read_bytes())
    assert renders[0] == renders[2], "f0 after f1, in another 'process', as f0 first"
    assert renders[0] != renders[3], "another seed draws other noise"


def test_the_manifest_skips_files_made_the_same_way_and_guards_the_others(tmp_path, capsys):
    source = _folder(tmp_path / "in", 2)
    out = tmp_path / "out"
    assert _render(source, out, "--workers", "1") == 0
    made = {p.name: p.stat().st_mtime_ns for p in out.glob("*.wav")}
    capsys.readouterr()
    assert _render(source, out, "--workers", "1") == 0
    said = capsys.readouterr().out
    assert said.count("kept ") == 2 and "wrote" not in said
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.wav")} == made
    # another preset made them otherwise: refused before anything is rendered, or --force
    argv = ["render", str(source), "-m", "drive", "-p", "none", "-o", str(out), "--workers", "1"]
    assert main(argv) == 2
    assert "not made by this render: pass --force" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.wav")} == made
    write_noise(source / "f0.wav", seed=9)  # a changed input renders again
    assert _render(source, out, "--workers", "1") == 2, "f0.wav's input changed: needs --force"
    assert _render(source, out, "--workers", "1", "--force") == 0
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["files"]["f0.wav"]["recipe"]["preset"] == "drive"


def test_other_threads_or_a_retuning_make_the_files_again(tmp_path, capsys, monkeypatch):
    """Several torch threads sum in another order (other bytes): a folder made with one is not
    kept for two. --retune makes the files again (their forms may change), without --force."""
    monkeypatch.setattr(convolution, "_RETUNED_SINCE", None)  # put back after
    source = _folder(tmp_path / "in", 1, stereo=False)
    out = tmp_path / "out"
    assert _render(source, out, "--workers", "1") == 0
    made = json.loads((out / MANIFEST).read_text())["files"]["f0.wav"]["recipe"]
    assert made["threads"] == 1 and "retune" not in made
    capsys.readouterr()
    assert _render(source, out, "--workers", "1", "--threads", "2") == 2
    assert "not made by this render: pass --force" in capsys.readouterr().err
    assert _render(source, out, "--workers", "1", "--retune") == 0
    assert "wrote" in capsys.readouterr().out
    assert _render(source, out, "--workers", "1") == 0
    assert "kept" in capsys.readouterr().out, "the retuned forms are the machine's now"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_interrupted_render_resumes_with_only_the_missing_files(tmp_path, capsys, workers):
    """Ctrl-C in the middle of a folder (a model taking 20 ms a block): the files written are
    complete and recorded, no partial file is left; the same command renders only the rest,
    and the folder is then what an uninterrupted render gives."""
    source = _folder(tmp_path / "in", 4, seconds=0.3)
    out = tmp_path / "out"
    command = ["render", str(source), "-m", SLOW, "--block", "1024", "--trust-model"]
    argv = [*command, "-o", str(out), "--workers", workers]
    process = subprocess.Popen(
        [sys.executable, "-m", "bendserver.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (out / MANIFEST).exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no file was ever written"
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "run the same command again" in err and "Traceback" not in err
    written = sorted(p.name for p in out.iterdir() if p.name != MANIFEST)
    recorded = sorted(json.loads((out / MANIFEST).read_text())["files"])
    assert written == recorded and 1 <= len(written) < 4, (written, err)
    for name in written:
        assert sf.info(str(out / name)).duration == pytest.approx(0.3)
    capsys.readouterr()
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert said.count("kept ") == len(written) and said.count("wrote ") == 4 - len(written)
    assert main([*command, "-o", str(tmp_path / "whole"), "--workers", "1"]) == 0
    whole = _files(tmp_path / "whole")
    resumed = _files(out)
    assert [n for n in resumed if n != MANIFEST] == [n for n in whole if n != MANIFEST]
    assert all(resumed[n] == whole[n] for n in whole if n != MANIFEST)


def test_a_file_put_in_place_as_the_run_is_interrupted_is_recorded(tmp_path, monkeypatch):
    """The finding (the test above failed one run in four): Ctrl-C right after a file was put
    in place, before the manifest recorded it, left the file unrecorded. Now Ctrl-C waits
    until both are done."""
    from bendserver.render import batch

    put = batch.commit

    def interrupted(temp, path):
        put(temp, path)
        signal.raise_signal(signal.SIGINT)  # Ctrl-C as the file lands

    monkeypatch.setattr(batch, "commit", interrupted)
    source, out = _folder(tmp_path / "in", 2, seconds=0.2), tmp_path / "out"
    model = f"{Path(__file__).parent / 'streaming.py'}:Identity"
    argv = ["render", str(source), "-m", model, "--trust-model", "--block", "1024", "-o", str(out)]
    assert main(argv) == 130
    written = sorted(p.name for p in out.iterdir() if p.name != MANIFEST)
    recorded = sorted(json.loads((out / MANIFEST).read_text())["files"])
    assert len(written) == 1 and written == recorded


@pytest.mark.slow  # a Ray cluster starts in ~10 s; the pool's tests check the same bytes
def test_ray_actors_write_the_bytes_of_a_sequential_render(tmp_path):
    """On a local Ray cluster of 2 CPUs: the driver sends the inputs and writes the outputs."""
    ray = pytest.importorskip("ray")
    source = _folder(tmp_path / "in", 3)
    assert _render(source, tmp_path / "pool", "--workers", "1") == 0
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert _render(source, tmp_path / "ray", "--workers", "2", "--ray") == 0
    finally:
        ray.shutdown()
    on_ray, in_pool = _files(tmp_path / "ray"), _files(tmp_path / "pool")
    assert sorted(on_ray) == sorted(in_pool)
    assert all(on_ray[name] == in_pool[name] for name in in_pool if name != MANIFEST)
    recorded = json.loads(on_ray[MANIFEST])["files"]
    assert sorted(recorded) == ["f0.wav", "f1.wav", "f2.wav"]


RAVE = Path(os.environ.get("BENDSERVER_RAVE_DIR", "/nonexistent")) / "rave_v2_streaming.ts"


@pytest.mark.skipif(not RAVE.is_file(), reason="BENDSERVER_RAVE_DIR holds no rave_v2_streaming.ts")
def test_a_rave_export_renders_the_same_bytes_in_two_workers(tmp_path):
    """A real RAVE v2 streaming export (its encoder samples its latents with torch's
    generator): a pool of two gives the bytes of one process."""
    source = tmp_path / "in"
    source.mkdir()
    for index in range(3):
        write_noise(source / f"f{index}.wav", seconds=1.0, rate=44100, seed=index)
    command = ["render", str(source), "-m", str(RAVE), "-p", "none", "--trust-model"]
    assert main([*command, "-o", str(tmp_path / "one"), "--workers", "1"]) == 0
    assert main([*command, "-o", str(tmp_path / "two"), "--workers", "2"]) == 0
    one, two = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert all(one[name] == two[name] for name in one if name != MANIFEST)


def test_a_form_plan_is_adopted_as_it_was_chosen(monkeypatch):
    """A worker takes the forms the first file's worker chose instead of timing its own."""
    monkeypatch.setattr(convolution, "_CHOSEN", {})
    key = [[1, 8, 300], [1, 8, 4], True, 1, torch.get_num_threads()]
    convolution.use_form_plan([[key, "tap sums"]])
    assert convolution.fastest_form((1, 8, 300), (1, 8, 4), True, 1) is convolution.tap_sum_conv1d
    assert convolution.form_plan() == [[key, "tap sums"]]
