"""Loading models: manifests, file.py:Class, nn~-style method buffers, and clear refusals."""

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from safetensors.torch import save_file

import bendserver as tb

MODEL = textwrap.dedent(
    """
    import torch
    from torch import nn

    class Gain(nn.Module):
        def __init__(self, channels=1, level=1.0):
            super().__init__()
            self.conv = nn.Conv1d(channels, channels, 1, bias=False)
            nn.init.constant_(self.conv.weight, level)

        def forward(self, x):
            return self.conv(x)
    """
)


def _folder(tmp_path, manifest, versions=("default",)):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "model.py").write_text(MODEL)
    for i, name in enumerate(versions):
        save_file(
            {"conv.weight": torch.full((1, 1, 1), float(i + 1))}, str(tmp_path / f"{name}.st")
        )
    (tmp_path / "manifest.toml").write_text(textwrap.dedent(manifest))
    return tmp_path


def test_manifest_folder_with_versions(tmp_path):
    folder = _folder(
        tmp_path,
        """
        name = "gain"
        description = "a gain"
        sample_rate = 44100
        block = 512
        latency = 3
        class = "model.py:Gain"
        [kwargs]
        level = 0.5
        [methods.forward]
        in_channels = 1
        out_channels = 1
        [versions]
        default = "default.st"
        loud = "loud.st"
        """,
        versions=("default", "loud"),
    )
    model = tb.load_model(folder)
    assert (model.name, model.sample_rate, model.block, model.latency) == ("gain", 44100, 512, 3)
    assert model.bended.versions == ["_default", "default", "loud"]
    x = torch.ones(1, 1, 4)
    assert torch.equal(model.bended(x), x)  # the first version's weights, not kwargs' 0.5
    with model.bended.set_version("loud"):
        assert torch.equal(model.bended(x), 2 * x)


def test_python_file_and_class(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    model = tb.load_model(f"{tmp_path}/model.py:Gain")
    assert model.name == "Gain" and list(model.methods) == ["forward"]


def test_nn_tilde_method_buffers():
    class Codec(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("encode_params", torch.tensor([1, 1, 4, 16]))

        def encode(self, x):
            return x.reshape(1, 16, -1)[:, :4]

    spec = tb.load_model(Codec()).method("encode")
    assert (spec.in_channels, spec.in_ratio, spec.out_channels, spec.out_ratio) == (1, 1, 4, 16)


@pytest.mark.parametrize(
    "manifest, message",
    [
        ('class = "model.py:Gain"\n', "lists no \\[versions\\]"),
        ('class = "model.py:Nope"\n[versions]\ndefault = "default.st"\n', "no torch.nn.Module"),
        ('class = "model.py:Gain"\n[versions]\ndefault = "gone.st"\n', "no weights file"),
        ("name = [unclosed\n", "not valid TOML"),
        ('[versions]\ndefault = "default.st"\n', "has no 'class'"),
    ],
)
def test_bad_manifests(tmp_path, manifest, message):
    with pytest.raises(tb.BendingError, match=message):
        tb.load_model(_folder(tmp_path, manifest))


def test_unknown_model_lists_known():
    with pytest.raises(tb.BendingError, match="no model at 'nonexistent'"):
        tb.load_model("nonexistent")


GAIN_MANIFEST = """
    name = "{name}"
    class = "model.py:Gain"
    [versions]
    default = "default.st"
"""


def test_names_resolve_along_the_search_path(tmp_path, monkeypatch):
    """--models-dir, then $BENDSERVER_MODELS, then the user's models, then the shipped ones."""
    places = {}
    for place in ("flag", "env", "home"):
        root = tmp_path / place / ("models" if place == "home" else "")
        for name in ("drive", "mine", f"only_{place}"):
            _folder((root / name).resolve(), GAIN_MANIFEST.format(name=f"{name}@{place}"))
        places[place] = root
    monkeypatch.setenv("BENDSERVER_MODELS", str(places["env"]))
    monkeypatch.setenv("BENDSERVER_HOME", str(tmp_path / "home"))
    found = lambda name, search=(): tb.load_model(name, search=search).name  # noqa: E731
    assert found("mine", [places["flag"]]) == "mine@flag"
    assert found("mine") == "mine@env"
    assert found("only_home") == "only_home@home"
    monkeypatch.delenv("BENDSERVER_MODELS")
    assert found("drive") == "drive@home", "the user's models before the shipped ones"
    (tmp_path / "home" / "models" / "drive" / "manifest.toml").unlink()
    assert found("drive") == "drive", "the shipped model"


def test_a_miss_names_the_models_and_folders_searched(tmp_path, monkeypatch):
    _folder(tmp_path / "extra" / "mine", GAIN_MANIFEST.format(name="mine"))
    with pytest.raises(tb.BendingError) as error:
        tb.load_model("nonexistent", search=[tmp_path / "extra"])
    message = str(error.value)
    assert "'drive'" in message and "'mine'" in message and "wavae" in message
    assert str(tmp_path / "extra") in message and "--models-dir" in message


def test_the_installed_package_carries_its_models_and_presets(tmp_path):
    """Built as a wheel (the top-level models/ mapped into the package) and run from another
    folder, without the source tree: every module, the models and the presets are in it. The
    build warns of nothing deprecated (a license table did)."""
    root = Path(__file__).resolve().parent.parent
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "wheel"), str(root)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    assert "deprecated" not in built.stdout + built.stderr, built.stderr
    (wheel,) = (tmp_path / "wheel").glob("bendserver-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(root).as_posix() for p in (root / "bendserver").rglob("*.py")}
    shipped = {f"bendserver/{p.relative_to(root).as_posix()}"
               for p in (root / "models").glob("*/*") if p.suffix != ".pyc"}  # fmt: skip
    assert {"bendserver/models/drive/model.py", "bendserver/models/wavae/strings.safetensors",
            "bendserver/models/drive/demo.flac"} <= shipped  # fmt: skip
    page = {f"bendserver/ui/static/{name}" for name in ("index.html", "app.js", "style.css")}
    carried = {"bendserver/presets/wavae.json", "bendserver/racks/wavae_drive.toml"}
    assert not (modules | shipped | page | carried) - names
    zipfile.ZipFile(wheel).extractall(tmp_path / "installed")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    soundfile.write(elsewhere / "x.wav", np.zeros(4800, np.float32), 48000)
    installed = {**os.environ, "PYTHONPATH": str(tmp_path / "installed")}
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from bendserver.cli import main; sys.exit(main())",
         "render", "x.wav", "-m", "wavae", "-p", "wavae", "-o", "y.wav"],
        capture_output=True, text=True, cwd=elsewhere, env=installed,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (elsewhere / "y.wav").is_file()
    where = subprocess.run(
        [sys.executable, "-c", "import bendserver; print(bendserver.__file__)"],
        capture_output=True, text=True, cwd=elsewhere, env=installed,
    )  # fmt: skip
    assert str(tmp_path / "installed") in where.stdout
