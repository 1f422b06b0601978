"""What a command plays, from its options: one model or a rack, built the one way every command
builds it (serve, render and sweep with their workers, bench, info).

``-m`` repeated, ``-m model.method`` or ``--rack FILE`` make a rack (:mod:`.rackspec`); one
``-m model`` plays its ``forward`` as a rack of one node (:class:`~.engine.StreamEngine`) with its
versions and its preset (``None``: the model's own, ``"none"``: none), whose MIDI mappings come
with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .audiofile import streams_for
from .engine import StreamEngine
from .engine.rack import Rack
from .errors import BendingError
from .loader import DEFAULT_MODEL, LoadedModel, add_versions, load_model
from .midi.mappings import Mapping
from .modulation.oscillators import starting
from .presets.library import load_preset, preset_for
from .rackspec import RackSpec, split_method


@dataclass(frozen=True)
class PlayOptions:
    """What plays and how: the model (or ``rack``), its preset, versions and latency, and the
    engine's block, device, optimisation and output fuse."""

    model: str = DEFAULT_MODEL
    method: str = "forward"
    #: A rack of several nodes (repeated ``-m``, ``--rack``) played instead of ``model``.
    rack: RackSpec | None = None
    preset: str | None = None  #: None: the model's own preset; "none": no preset
    models_dir: tuple[str, ...] = ()  #: more folders to find model names in
    versions: tuple[str, ...] = ()  #: weight files added as versions (one model)
    latency: int | None = None  #: the model's latency in samples (None: its own, or measured)
    block: int | None = None  #: None: the (first) model's block
    device: str = "cpu"
    optimize: str = "passes"
    fuse: bool = True  #: the output fuse (NaN guard, DC blocker, limiter)
    cuda_graph: bool = True  #: on CUDA, the graph captured (else eager CUDA)

    @classmethod
    def of(cls, options: Any) -> PlayOptions:
        """The play options of a command's (its parsed arguments, or ``ServeOptions``): the
        names the command line gives them (``version``, ``no_fuse``); those it lacks default."""
        given = vars(options)
        return cls(
            model=given.get("model") or DEFAULT_MODEL,
            method=given.get("method", "forward"),
            rack=given.get("rack"),
            preset=given.get("preset"),
            models_dir=tuple(given.get("models_dir", ())),
            versions=tuple(given.get("version", ())),
            latency=given.get("latency"),
            block=given.get("block"),
            device=given.get("device", "cpu"),
            optimize=given.get("optimize", "passes"),
            fuse=not given.get("no_fuse", False),
        )

    def load(self) -> LoadedModel:
        """The one model (without ``rack``), its versions added."""
        model = load_model(self.model, self.device, self.models_dir, self.latency)
        add_versions(model, self.versions)
        return model

    def build(
        self, channels: int | None = None, model: LoadedModel | None = None
    ) -> tuple[Rack, list[Mapping]]:
        """The rack that plays, and the MIDI mappings of its (one model's) preset. ``channels``:
        those played, one stream of the model each (None: one; a render sets the file's);
        ``model``: the one model, already loaded (default: :meth:`load`)."""
        if self.rack is not None:
            rack = self.rack.build(
                self.block, self.device, self.optimize, None, self.fuse, self.models_dir,
                self.preset,
            )  # fmt: skip
            if channels is not None:
                rack.set_streams(streams_for(channels, rack.spec.in_channels))
            starting(rack)
            return rack, []
        model = self.load() if model is None else model
        name = preset_for(model, self.preset)
        preset = load_preset(name) if name is not None else None
        streams = None
        if channels is not None:
            streams = streams_for(channels, model.method(self.method).in_channels)
        engine = StreamEngine(
            model,
            self.method,
            block=self.block,
            device=self.device,
            preset=preset,
            fuse=self.fuse,
            optimize=self.optimize,
            streams=streams,
            cuda_graph=self.cuda_graph,
        )
        starting(engine, preset.modulators if preset is not None else None)
        return engine, preset.midi if preset is not None else []


def chosen(models: Sequence[str] | str | None, rack: str | None) -> tuple[str, RackSpec | None]:
    """What the command line names: the (first) model, and the rack of repeated ``-m``,
    ``-m model.method`` or ``--rack FILE`` (None: the one model's ``forward``), checked."""
    listed = None if isinstance(models, str) else models
    if listed and rack is not None:
        raise BendingError("give the models with -m or with --rack, not both")
    if rack is not None:
        spec = RackSpec.find(rack)
    else:
        names = listed or [models or DEFAULT_MODEL]
        model, method = split_method(names[0])
        several = len(names) > 1 or method != "forward"
        spec = RackSpec.chain(names) if several else None
        if spec is None:
            return model, None
    spec.check()
    return spec.nodes[0].model, spec
