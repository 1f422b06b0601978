"""Loading models: a folder with a manifest, or a Python class given as ``file.py:Class``.

A model's ``manifest.toml`` names the class, its constructor arguments, the sample rate and
channels, the native block size, each method's channels and rate ratios (nn~'s convention), the
weight versions (one safetensors file each, the first being the default), the demo sound, the
default preset and the latency the model adds. Weights are read with safetensors: nothing is
unpickled.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from .attributes import Attribute, file_attributes
from .bending.module import BendedModule
from .cache import CacheFile, file_digest
from .codegen import compile_source
from .errors import BendingError
from .limits import MAX_SOURCE_CHARS
from .paths import model_search_path
from .readers import expect, optional, read_toml
from .tracing.latency import PROBE_SECONDS, measure_latency

DEFAULT_MODEL = "drive"
#: File names read as TorchScript (nn~'s format).
TORCHSCRIPT_SUFFIXES = (".ts", ".torchscript")
_CLASS = re.compile(r".+\.py:[A-Za-z_]\w*")
#: TorchScript files' latencies by their digest, block and rate (measuring one takes seconds).
_LATENCIES = CacheFile("latency", {"torch": torch.__version__})


@dataclass(frozen=True)
class MethodSpec:
    """Channels and rate ratios of one method (``ratio`` = audio samples per model frame)."""

    in_channels: int = 1
    in_ratio: int = 1
    out_channels: int = 1
    out_ratio: int = 1


@dataclass
class LoadedModel:
    """A model ready to stream: the bendable module and what the manifest says about it."""

    name: str
    bended: BendedModule
    sample_rate: int = 48000
    block: int = 2048
    #: Blocks the model can stream are multiples of this (its total stride).
    block_multiple: int = 1
    latency: int = 0
    #: Where ``latency`` comes from (the manifest, measured at load, given), shown with it.
    latency_source: str = "manifest"
    methods: dict[str, MethodSpec] = field(default_factory=lambda: {"forward": MethodSpec()})
    description: str = ""
    path: Path | None = None
    demo: Path | None = None
    preset: str | None = None
    manifest: dict[str, Any] = field(default_factory=dict)
    #: A TorchScript file's nn~ attributes by name (:mod:`bendserver.attributes`).
    attributes: dict[str, Attribute] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.methods:
            inputs = _required_inputs(getattr(self.bended.module, name, None))
            if inputs is not None and len(inputs) > 1:
                raise BendingError(
                    f"model '{self.name}': {name}() takes {len(inputs)} inputs "
                    f"({', '.join(inputs)}); a streamed method takes one audio tensor, as nn~'s "
                    "do: give the others default values, or wrap the model in one that does"
                )

    @property
    def module(self) -> nn.Module:
        return self.bended.module

    def method(self, name: str) -> MethodSpec:
        if name not in self.methods:
            raise BendingError(
                f"model '{self.name}' has no streaming method '{name}'; "
                f"it has {sorted(self.methods)}"
            )
        return self.methods[name]


def _required_inputs(method: Any) -> list[str] | None:
    """The inputs ``method`` cannot be called without (a Python or a TorchScript method), or
    None when it has no signature to read."""
    schema = getattr(method, "schema", None)
    if schema is not None:  # a TorchScript method: its first argument is self
        return [a.name for a in schema.arguments[1:] if not a.has_default_value()]
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters if p.kind in positional and p.default is p.empty]


def resolve_device(device: str | torch.device) -> torch.device:
    """The torch device named ``cpu``, ``cuda`` or ``cuda:N`` (``cuda``: the current one, by
    index, as tensors report theirs), refused with what to do when this machine has no such
    device (before any weight is loaded)."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        resolved = None
    if resolved is None or resolved.type not in ("cpu", "cuda"):
        raise BendingError(f"a device is cpu, cuda or cuda:N (e.g. cuda:0), not {device!r}")
    if resolved.type == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise BendingError("this machine has no CUDA device; use --device cpu")
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if resolved.index is None else resolved.index
    if index >= count:
        raise BendingError(
            f"no CUDA device {index}: this machine has {count} (cuda:0 to cuda:{count - 1})"
        )
    return torch.device("cuda", index)


def load_model(
    source: str | Path | nn.Module | LoadedModel,
    device: str | torch.device = "cpu",
    search: Iterable[str | Path] = (),
    latency: int | None = None,
    code_from: Iterable[str | Path] | None = None,
) -> LoadedModel:
    """Load a model by name, a model folder, ``path/file.py:Class``, or wrap a module, with its
    weights on ``device``. ``latency`` (samples) replaces the manifest's, or a TorchScript
    file's measurement at load (:mod:`bendserver.tracing.latency`), which it skips. ``code_from``
    (a live server's loads, asked for by messages): import Python code only from the model
    folders of the search path and these folders (:func:`check_code`); None: from anywhere.

    A bare name (``"drive"``) is looked up along the model search path (:mod:`bendserver.paths`:
    the folders in ``search``, ``$BENDSERVER_MODELS``, the user's models, the shipped ones). A
    module or a loaded model is used as it is (move it to the device before).
    """
    if isinstance(source, LoadedModel):
        return source
    if latency is not None and (type(latency) is not int or latency < 0):
        raise BendingError(f"a latency is a whole number of samples from 0, got {latency!r}")
    model = _load(source, device, search, latency is None, code_from)
    if latency is not None:
        model.latency, model.latency_source = int(latency), "given"
    return model


def _load(
    source: str | Path | nn.Module,
    device: str | torch.device,
    search: Iterable[str | Path],
    measure: bool,
    code_from: Iterable[str | Path] | None = None,
) -> LoadedModel:
    """:func:`load_model` of a source that is not loaded yet; ``measure``: a TorchScript
    file's latency; ``code_from``: where Python code may be imported from (None: anywhere)."""
    if isinstance(source, nn.Module):
        return _from_module(type(source).__name__, source)
    device = resolve_device(device)
    text = model_source(source)
    search = tuple(search)
    if _CLASS.fullmatch(text):
        file, class_name = text.rsplit(":", 1)
        if code_from is not None:
            check_code(text, Path(file), search, code_from)
        module = _load_class(Path(file), class_name)().to(device)
        return _from_module(class_name, module)
    path = model_location(text, search) or Path(text)
    if path.suffix in TORCHSCRIPT_SUFFIXES and path.is_file():
        return _from_torchscript(path, device, measure)
    if not (path / "manifest.toml").is_file():
        folders = model_search_path(search)
        known = sorted({p.parent.name for f in folders for p in f.glob("*/manifest.toml")})
        raise BendingError(
            f"no model at {text!r}: give a model folder (with a manifest.toml), an nn~ "
            f"TorchScript file (.ts), path/file.py:Class, or a name from {known} (searched: "
            f"{', '.join(str(f) for f in folders)}; add folders with --models-dir or "
            "BENDSERVER_MODELS)"
        )
    if code_from is not None:
        check_code(text, path, search, code_from)
    return _from_folder(path, device)


def check_code(
    source: str, location: Path, search: Iterable[str | Path], code_from: Iterable[str | Path]
) -> None:
    """Refuse to import the Python code at ``location`` (a model folder or a ``.py`` file that
    ``source`` names) unless it lies in a model folder of the search path or one of
    ``code_from``: what a live server loads is asked for by messages, from any client it takes,
    and only the person who started it decides where code may come from."""
    place = Path(os.path.abspath(location))  # ".." resolved: no way out of a folder
    folders = [*model_search_path(search), *map(Path, code_from)]
    if any(place.is_relative_to(os.path.abspath(folder)) for folder in folders):
        return
    raise BendingError(
        f"model {source!r} is Python code outside the model folders: a live server imports "
        "code only from its model folders (load those by name) and the folders given to serve "
        "--allow-code-from DIR; TorchScript files (.ts) load from anywhere"
    )


def model_location(source: str | Path, search: Iterable[str | Path] = ()) -> Path | None:
    """The file or folder holding the model's code that ``source`` names (as :func:`load_model`
    reads it: ``file.py:Class``, a TorchScript file, a model folder, a name along the search
    path), or None when it names none."""
    text = model_source(source)
    if _CLASS.fullmatch(text):
        return Path(text.rsplit(":", 1)[0])
    path = Path(text)
    if (path.suffix in TORCHSCRIPT_SUFFIXES and path.is_file()) or (
        path / "manifest.toml"
    ).is_file():
        return path
    if re.fullmatch(r"[\w-]+", text):
        folders = model_search_path(search)
        return next((f / text for f in folders if (f / text / "manifest.toml").is_file()), None)
    return None


def model_source(source: str | Path) -> str:
    """A model source as text, refused past :data:`MAX_SOURCE_CHARS` (no path is longer)."""
    text = str(source)
    if len(text) > MAX_SOURCE_CHARS:
        raise BendingError(
            f"a model is named in at most {MAX_SOURCE_CHARS} characters (a name, a path, "
            f"file.py:Class); this one has {len(text)}"
        )
    return text


def _from_folder(path: Path, device: torch.device) -> LoadedModel:
    manifest = _read_manifest(path / "manifest.toml")
    file, class_name = _required(manifest, "class", path).rsplit(":", 1)
    cls = _load_class(path / file, class_name)
    try:
        module = cls(**manifest.get("kwargs", {}))
    except Exception as error:
        raise BendingError(f"{path.name}: {class_name}(**kwargs) failed: {error}") from error
    versions = manifest.get("versions", {})
    if not versions:
        raise BendingError(f"{path}/manifest.toml lists no [versions] (name = file.safetensors)")
    weights = {name: _load_weights(path / file, device) for name, file in versions.items()}
    default, *others = weights
    missing, unexpected = module.load_state_dict(weights[default], strict=False)
    if missing or unexpected:
        raise BendingError(
            f"{path.name}: version '{default}' does not fit {class_name}: "
            f"missing {missing}, unexpected {unexpected}"
        )
    module.to(device).eval()
    bended = BendedModule(module)
    bended.weight_bank.alias(default)
    for name in others:
        bended.create_version(name, weights[name])
    methods = {
        name: MethodSpec(**{k: int(v) for k, v in spec.items() if k in MethodSpec.__annotations__})
        for name, spec in manifest.get("methods", {"forward": {}}).items()
    }
    demo = manifest.get("demo")
    return LoadedModel(
        name=manifest.get("name", path.name),
        bended=bended,
        sample_rate=int(manifest.get("sample_rate", 48000)),
        block=int(manifest.get("block", 2048)),
        block_multiple=int(manifest.get("block_multiple", 1)),
        latency=int(manifest.get("latency", 0)),
        methods=methods,
        description=manifest.get("description", ""),
        path=path,
        demo=path / demo if demo else None,
        preset=manifest.get("preset"),
        manifest=manifest,
    )


def _from_module(name: str, module: nn.Module) -> LoadedModel:
    """A bare module: nn~-style ``<method>_params`` buffers give its methods, else forward 1:1."""
    module.eval()
    return LoadedModel(
        name=name,
        bended=BendedModule(module),
        latency_source="none given",
        methods=_methods(module) or {"forward": MethodSpec()},
    )


def _methods(module: nn.Module, names: list[str] | None = None) -> dict[str, MethodSpec]:
    """nn~'s method table: each ``<method>_params`` buffer ``[in_ch, in_ratio, out_ch,
    out_ratio]`` (of ``names`` only, when given)."""
    methods = {}
    for buffer_name, buffer in module.named_buffers():
        name = buffer_name[: -len("_params")]
        if buffer_name.endswith("_params") and buffer.numel() == 4 and name in (names or [name]):
            in_ch, in_ratio, out_ch, out_ratio = (int(v) for v in buffer.tolist())
            methods[name] = MethodSpec(in_ch, in_ratio, out_ch, out_ratio)
    return methods


def _from_torchscript(path: Path, device: torch.device, measure: bool = True) -> LoadedModel:
    """An nn~ TorchScript file (RAVE's ``export --streaming``, an ``nn_tilde.Module``): its
    methods from ``get_methods()`` (else every ``<method>_params`` buffer), its rate from
    ``sr``; ``set_sample_rate`` is called as nn~ does; its latency measured (unless
    ``measure`` is false: given). Weights bend in place; activations need the Python model."""
    try:
        module = torch.jit.load(str(path), map_location=device)
    except (RuntimeError, ValueError) as error:
        raise BendingError(
            f"{path} is not a TorchScript file that torch {torch.__version__} loads: {error}"
        ) from None
    module.eval()
    names = list(module.get_methods()) if hasattr(module, "get_methods") else None
    methods = _methods(module, names)
    if not methods:
        raise BendingError(
            f"{path} has no nn~ methods: neither get_methods() nor <method>_params buffers"
        )
    sample_rate = _sample_rate(module)
    if hasattr(module, "set_sample_rate"):
        module.set_sample_rate(sample_rate)
    attributes = file_attributes(module)
    ratios = [r for spec in methods.values() for r in (spec.in_ratio, spec.out_ratio)]
    fixed = int(getattr(module, "block_size", 0) or 0)  # a bendserver export of bended graphs
    block = fixed or max(2048, math.lcm(*ratios))
    latency, source = _measured(module, methods, block, sample_rate, path) if measure else (0, "")
    bended = BendedModule(module)
    bended.weight_bank.alias(path.stem)  # a version named after its file, as --add-version's are
    return LoadedModel(
        name=path.stem,
        bended=bended,
        sample_rate=sample_rate,
        block=block,
        block_multiple=fixed or math.lcm(*ratios),
        latency=latency,
        latency_source=source,
        methods=methods,
        description=f"TorchScript file {path.name}",
        path=path,
        attributes=attributes,
    )


def _sample_rate(module: nn.Module) -> int:
    """A file's rate: its ``sr`` (an int in RAVE's files, ``Optional[int]`` in nn-tilde 1.6's,
    a one-value nn~ attribute in nn-tilde 1.5's), else 48000."""
    rate = getattr(module, "sr", None)
    if isinstance(rate, (tuple, list)) and len(rate) == 1:
        rate = rate[0]
    return rate if isinstance(rate, int) and not isinstance(rate, bool) and rate > 0 else 48000


def _measured(
    module: nn.Module, methods: dict[str, MethodSpec], block: int, sample_rate: int, path: Path
) -> tuple[int, str]:
    """The latency of ``forward`` and where it comes from, or 0 and why not: measured at the
    file's first load, then kept for its digest (:mod:`bendserver.cache`)."""
    spec = methods.get("forward")
    if spec is None or (spec.in_ratio, spec.out_ratio) != (1, 1):
        return 0, "not measured: no audio-to-audio forward (give --latency)"
    key = f"{file_digest(path)} forward {block} {sample_rate}"
    kept = _LATENCIES.get(key)
    if isinstance(kept, dict) and isinstance(kept.get("samples"), (int, type(None))):
        latency, source = kept["samples"], "measured at load, kept for this file"
    else:
        latency = measure_latency(module, "forward", spec.in_channels, block, sample_rate)
        _LATENCIES.settle(key, {"samples": latency})
        source = "measured at load"
    if latency is None:
        return (
            0,
            f"not measured: an impulse changed nothing within {PROBE_SECONDS:g} s (give --latency)",
        )
    return latency, source


def add_versions(model: LoadedModel, files: Iterable[str | Path]) -> None:
    """Add each file's weights as a version named after the file: another nn~ TorchScript file
    of the same architecture (``.ts``) or a safetensors file. Names and shapes must match."""
    for file in map(Path, files):
        if not file.is_file():
            raise BendingError(f"--add-version: no file {file}")
        if file.suffix in TORCHSCRIPT_SUFFIXES:
            try:
                loaded = torch.jit.load(str(file), map_location="cpu")
            except (RuntimeError, ValueError) as error:
                raise BendingError(f"{file} is not a TorchScript file: {error}") from None
            weights = _file_weights(loaded, model.bended.weight_names)
        elif file.suffix == ".safetensors":
            weights = load_file(str(file))
        else:
            raise BendingError(f"--add-version takes .ts or .safetensors files, got {file.name}")
        bank = model.bended.weight_bank
        if file.stem in bank.versions:
            raise BendingError(
                f"--add-version {file}: the model has a version '{file.stem}' already (versions "
                f"are named after their files): rename this file"
            )
        device = next(iter(bank.slots.values())).device
        model.bended.create_version(file.stem, {k: v.to(device) for k, v in weights.items()})


def _file_weights(module: nn.Module, names: list[str]) -> dict[str, torch.Tensor]:
    """A TorchScript file's weights by the names the model gives them: its parameters, or in a
    file ``bendserver export`` wrote, the tensors its graphs hold under those names."""
    weights = dict(module.named_parameters())
    if set(names) <= set(weights):
        return weights
    if hasattr(module, "get_methods"):  # an exported file computes its bended weights there
        module.get_methods()
    held = dict(module.named_buffers())
    for name in set(names) - set(weights):
        found = next((t for key, t in held.items() if key.endswith(f".{name}")), None)
        if found is not None:
            weights[name] = found
    return weights


#: The manifest keys bendserver reads, with their kinds (:func:`bendserver.readers.expect`) and
#: the least value of the numbers; other keys (a ``[training]`` table) are the model's own.
MANIFEST_KEYS: dict[str, tuple[str, int | None]] = {
    **dict.fromkeys(("name", "description", "class", "demo", "preset"), ("text", None)),
    **dict.fromkeys(("sample_rate", "channels", "block", "block_multiple"), ("integer", 1)),
    "latency": ("integer", 0),
    **dict.fromkeys(("kwargs", "versions", "methods"), ("object", None)),
}


def _read_manifest(path: Path) -> dict[str, Any]:
    """A model's manifest, read strictly (:func:`bendserver.readers.read_toml`) and checked:
    each key bendserver reads has its kind; errors name the key."""
    manifest = read_toml(path, "manifest")
    try:
        for key, (kind, least) in MANIFEST_KEYS.items():
            value = optional(manifest, key, kind, "")
            if least is not None and value is not None and value < least:
                raise BendingError(f"{key} is at least {least}, got {value}")
        if "class" in manifest and not _CLASS.fullmatch(manifest["class"]):
            raise BendingError(f"class is 'file.py:ClassName', got {manifest['class']!r}")
        for name, file in manifest.get("versions", {}).items():
            expect(file, "text", f"versions.{name}")
        for name, spec in manifest.get("methods", {}).items():
            expect(spec, "object", f"methods.{name}")
            for key in MethodSpec.__annotations__:
                if expect(spec.get(key, 1), "integer", f"methods.{name}.{key}") < 1:
                    raise BendingError(f"methods.{name}.{key} is at least 1, got {spec[key]}")
    except BendingError as error:
        raise BendingError(f"{path}: {error}") from None
    return manifest


def _required(manifest: dict[str, Any], key: str, path: Path) -> Any:
    if key not in manifest:
        raise BendingError(f"{path}/manifest.toml has no '{key}'")
    return manifest[key]


def _load_class(file: Path, class_name: str) -> type[nn.Module]:
    """Import ``class_name`` from a model's Python file (the model's own code)."""
    if not file.is_file():
        raise BendingError(f"no model file {file}")
    module_name = f"bendserver_models.{file.parent.name}.{file.stem}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    code = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = code
    try:  # as the import system runs it; a long file compiled aside on a live server
        exec(compile_source(importlib.util.decode_source(file.read_bytes()), str(file)), vars(code))
    except Exception as error:
        del sys.modules[module_name]
        raise BendingError(f"importing {file} failed: {type(error).__name__}: {error}") from error
    cls = getattr(code, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise BendingError(f"{file} defines no torch.nn.Module named {class_name!r}")
    return cls


def _load_weights(file: Path, device: torch.device) -> dict[str, torch.Tensor]:
    if not file.is_file():
        raise BendingError(f"no weights file {file}")
    return load_file(str(file), device=str(device))
