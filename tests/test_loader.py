"""Loading models: manifests, file.py:Class, nn~-style method buffers, and clear refusals."""

import textwrap

import pytest
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
