"""The output folder's manifest (``.bendserver-render.json``): what made each file (model,
preset, score, options, the input's digest), the digest of the file made, and the convolution
forms the run chose; a file already made the same way is skipped, so an interrupted run resumes
where it stopped."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BendingError
from ..files import write_text
from ..readers import read_json

if TYPE_CHECKING:
    from .worker import Job

#: The manifest's name in the output folder (hidden: a folder of sound files does not list it).
MANIFEST = ".bendserver-render.json"


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def made_by(recipe: dict[str, Any], job: Job) -> dict[str, Any]:
    """What makes ``job``'s file: the recipe, the input's digest, the score and the cell."""
    events = [[e.time, e.address, list(e.args)] for e in job.events]
    made = {
        "recipe": recipe,
        "input": {"name": Path(job.source).name, "sha256": file_digest(job.source)},
        "events": events,
        "settings": dict(job.settings),
    }
    return json.loads(json.dumps(made))  # as the manifest reads it back


class Manifest:
    """The output folder's record of what made each file (and the digest of the file it made),
    and the convolution forms used (with their digest: a manifest edited by hand is refused)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / MANIFEST
        self.files: dict[str, Any] = {}
        self.plan: list = []
        if self.path.is_file():
            try:
                data = read_json(self.path, "render manifest")
                self.files, self.plan = dict(data["files"]), list(data["forms"])
                edited = data["forms_sha256"] != _digest(self.plan)
            except (BendingError, KeyError, TypeError, ValueError):
                raise BendingError(
                    f"{self.path} is not a render manifest bendserver can read: remove it "
                    "(the files are then rendered again)"
                ) from None
            if edited:
                raise BendingError(
                    f"{self.path}: its convolution forms were edited since bendserver wrote them: "
                    "remove it (the files are then rendered again)"
                )
            _check_forms(self.plan, self.path)

    def made(self, target: Path, what: dict[str, Any]) -> bool:
        """Whether ``target`` was made by ``what`` and is the file it made (its digest)."""
        recorded = dict(self.files.get(target.name) or {})
        digest = recorded.pop(OUTPUT_DIGEST, None)
        return recorded == what and target.is_file() and file_digest(target) == digest

    def changed(self, target: Path) -> bool:
        """Whether ``target`` is a file this manifest recorded that is no longer the one made."""
        digest = (self.files.get(target.name) or {}).get(OUTPUT_DIGEST)
        return digest is not None and target.is_file() and file_digest(target) != digest

    def record(self, target: Path, what: dict[str, Any]) -> None:
        self.files[target.name] = {**what, OUTPUT_DIGEST: file_digest(target)}
        self.save()

    def save(self) -> None:
        data = {"format": "bendserver.render", "version": 2, "forms": self.plan}
        data["forms_sha256"] = _digest(self.plan)
        write_text(self.path, json.dumps({**data, "files": self.files}, indent=1) + "\n")


#: Where a manifest's record of a file keeps the digest of the file made.
OUTPUT_DIGEST = "output_sha256"


def _digest(value: Any) -> str:
    """SHA-256 of a JSON value as the manifest writes it."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _check_forms(plan: list, path: Path) -> None:
    """Refuse a manifest's convolution forms that name no form, or one that cannot compute its
    convolution (:mod:`bendserver.passes.convolution`: a transposed one's own, a stride only
    where a form takes it, none for a one-tap kernel of stride 1 but the strided ones)."""
    from ..passes.convolution import FORMS, STRIDED, TRANSPOSED_FORMS

    for entry in plan:
        try:
            (x_shape, weight_shape, _, dilation, _, *kind), name = entry
            stride, transposed = kind or (1, False)
            taps = weight_shape[-1]
            assert all(type(n) is int for n in (*x_shape, *weight_shape, dilation, stride))
        except (AssertionError, IndexError, TypeError, ValueError):
            raise BendingError(
                f"{path}: {json.dumps(entry)[:200]} is no convolution's form: remove the manifest "
                "(the files are then rendered again)"
            ) from None
        if transposed:
            fits = name in TRANSPOSED_FORMS
        else:
            form = FORMS.get(name)
            fits = form is not None and (form in STRIDED or (stride == 1 and taps != 1))
        if name is not None and not fits:
            raise BendingError(
                f"{path}: the form {str(name)[:40]!r} cannot compute the convolution of input "
                f"{x_shape} and weight {weight_shape} (stride {stride}): remove the manifest "
                "(the files are then rendered again)"
            )
