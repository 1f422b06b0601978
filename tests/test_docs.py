"""Every example in README.md and docs/ runs, so that the docs cannot drift from the code.

Python blocks of one page run in order in one namespace (later blocks build on earlier ones). A
line whose comment names an error (``bended(x)   # FlowGuardError: ...``) must raise that
error. Shell blocks: each ``bendserver render|sweep|info|bench|serve|export`` line runs (bench
with few calls, serve for a second on the null backend); ``bendserver stress`` takes minutes and
has its own test (tests/test_serve_jack.py). A block preceded by ``<!-- not run: reason -->`` is
skipped, with its reason in the page.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
import soundfile as sf
import torch
from jack import jack_server

import bendserver as tb
from bendserver.cli import main

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"(<!-- not run: [^>]+-->\n)?```(python|sh)\n(.*?)```", re.DOTALL)
_RAISES = re.compile(r"^(?P<code>\S.*?)\s+# (?P<error>\w+Error)\b")


def blocks(page: Path, language: str) -> list[str]:
    """The page's runnable blocks of ``language``."""
    text = page.read_text(encoding="utf-8")
    return [m.group(3) for m in _BLOCK.finditer(text) if m.group(2) == language and not m.group(1)]


def as_checked_code(block: str) -> str:
    """The block with each line that names an error wrapped in ``pytest.raises``."""
    lines = []
    for line in block.splitlines():
        match = _RAISES.match(line)
        if match and getattr(tb, match["error"], None) is not None:
            lines += [f"with pytest.raises(tb.{match['error']}):", f"    {match['code']}"]
        else:
            lines.append(line)
    return "\n".join(lines)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_python_examples_run(page, tmp_path, monkeypatch):
    code = blocks(page, "python")
    if not code:
        pytest.skip(f"{page.name} has no python example")
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    namespace = {"pytest": pytest, "tb": tb, "__name__": f"doc_{page.stem}"}
    for index, block in enumerate(code):
        try:
            exec(
                compile(as_checked_code(block), f"{page.name} block {index + 1}", "exec"), namespace
            )
        except Exception as error:
            raise AssertionError(f"{page.name}, python block {index + 1}:\n{block}") from error


def commands(page: Path) -> list[list[str]]:
    """The ``bendserver render|sweep|info|bench|serve|export`` command lines of the page's
    shell blocks."""
    found = []
    for block in blocks(page, "sh"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["bendserver"] and words[1] in (
                "render",
                "sweep",
                "info",
                "bench",
                "serve",
                "export",
            ):
                found.append(words)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_shell_examples_run(page, tmp_path, monkeypatch):
    lines = commands(page)
    if not lines:
        pytest.skip(f"{page.name} has no bendserver render/info/bench line")
    monkeypatch.chdir(ROOT)
    demo = _clip(tb.load_model("drive").demo, tmp_path / "demo.flac")
    for words in lines:
        args = [_local(word, demo, tmp_path) for word in words[1:]]
        if args[0] == "bench":
            args += ["--calls", "5", "--apply-sizes", "0"]
        if args[0] == "render":
            args.append("--force")
        if args[0] == "serve":  # a moment on the null backend, on a free port
            args = _without(args, "--audio") + ["--audio", "null", "--duration", "0.3"]
            args += ["--osc-port", "0", "--reply-port", "0"]
        # MIDI needs a MIDI system: a dummy JACK server's (this process's default meanwhile)
        with jack_server() if "--midi" in args else contextlib.nullcontext():
            code, said = _command(args)
        assert code == 0, f"{page.name}: {' '.join(words)}\n{said}"


def _command(args: list[str]) -> tuple[int, str]:
    """``bendserver ARGS`` run in this process (a new interpreter per line would cost an import
    of torch each), and what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = main(args)
    return code, printed.getvalue()


def _clip(sound: Path, clip: Path, seconds: float = 1.5) -> Path:
    """The first ``seconds`` of ``sound`` written to ``clip``: the examples run what the docs
    say on a short file (a render's cost grows with its length, not what it checks)."""
    audio, rate = sf.read(str(sound), dtype="float32")
    sf.write(str(clip), audio[: int(seconds * rate)], rate)
    return clip


def _without(args: list[str], option: str) -> list[str]:
    """``args`` without ``option`` and its value."""
    if option not in args:
        return args
    index = args.index(option)
    return args[:index] + args[index + 2 :]


def _local(word: str, demo: Path, folder: Path) -> str:
    """A doc's file names made real: sound files are the clip of the demo, outputs go to
    ``folder``, a folder of sound files holds the demo twice, a score file is written there,
    and ``.ts`` files are written and read there."""
    if word.endswith("/") and not (ROOT / word).exists():
        if "out" in word:
            return f"{folder / word.strip('/')}/"
        sounds = folder / word.strip("/")
        sounds.mkdir(parents=True, exist_ok=True)
        for name in ("a.wav", "b.flac"):
            sf.write(str(sounds / name), sf.read(str(demo), dtype="float32")[0], 48000)
        return str(sounds)
    is_sound_file = Path(word).suffix in (".wav", ".flac") and not word.startswith(".")
    if is_sound_file and ("out" in word or "take" in word) and not (ROOT / word).exists():
        return str(folder / Path(word).name)
    if is_sound_file:  # an input, a shipped demo too (which must be there for a newcomer)
        assert not word.startswith("models/") or (ROOT / word).is_file(), f"no {word} is shipped"
        copy = folder / "in" / Path(word).name  # the demo, under the doc's name and format
        if not copy.exists():
            copy.parent.mkdir(exist_ok=True)
            audio, rate = sf.read(str(demo), dtype="float32")
            sf.write(str(copy), audio, rate)
        return str(copy)
    if word.endswith(".ts") and not (ROOT / word).exists():  # an export, then its use
        return str(folder / Path(word).name)
    if word.endswith(".txt"):
        score = folder / Path(word).name
        score.write_text("0.5 /engine/gain 0.5\n", encoding="utf-8")
        return str(score)
    return word
