"""A sweep's contact sheet: one spectrogram per cell in a grid whose rows and columns are the
varied settings, as a PNG and as a static HTML page (each cell's image, player and figures).

Drawn with matplotlib's Agg backend (no display needed). Rows are the first axis' values;
columns the combinations of the others (a single axis gives one row).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..audiofile import read_sound
from ..files import write_text, writing
from .sweep import FEATURES, Axis, spectrogram_db

#: Spectrograms are drawn up to this frequency (Hz) and over this range (dB below the top).
TOP_HZ, RANGE_DB = 12000.0, 80.0


@dataclass(frozen=True)
class Cell:
    """One rendered cell: its file, its settings, its measured features."""

    path: Path
    settings: tuple[tuple[str, float], ...]
    measured: dict[str, float]


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _image(path: Path) -> tuple[np.ndarray, float, float]:
    """A cell's spectrogram in dB (channels mixed down) up to TOP_HZ, its duration and top."""
    audio, info = read_sound(path)
    db, frequencies = spectrogram_db(audio.mean(0), info.samplerate)
    keep = frequencies <= TOP_HZ
    return db[keep], info.duration, float(frequencies[keep][-1])


def _label(settings: tuple[tuple[str, float], ...]) -> str:
    return ", ".join(f"{name} {value:g}" for name, value in settings)


def _column(axes: list[Axis], cell: Cell) -> str:
    """A column's heading: the settings but the first axis' (which names the rows)."""
    return _label(cell.settings[1:] if len(axes) > 1 else cell.settings)


def _grid(axes: list[Axis], cells: list[Cell]) -> list[list[Cell]]:
    """The cells in rows of the first axis' values (cells come first axis slowest)."""
    columns = len(cells) // len(axes[0].values) if len(axes) > 1 else len(cells)
    return [cells[i : i + columns] for i in range(0, len(cells), columns)]


def contact_sheet(axes: list[Axis], cells: list[Cell], png: Path, page: Path, title: str) -> None:
    """Write the PNG grid and the HTML page (with one PNG per cell in ``page``'s folder)."""
    plt = _pyplot()
    grid = _grid(axes, cells)
    images = {cell.path: _image(cell.path) for cell in cells}
    top = max(float(image.max()) for image, _, _ in images.values())
    scale = {"vmin": top - RANGE_DB, "vmax": top, "cmap": "magma", "origin": "lower"}
    rows, columns = len(grid), len(grid[0])
    figure, panels = plt.subplots(
        rows, columns, figsize=(2.2 * columns + 1, 1.6 * rows + 1), squeeze=False
    )
    for r, row in enumerate(grid):
        for c, cell in enumerate(row):
            image, seconds, high = images[cell.path]
            panel = panels[r][c]
            panel.imshow(image, aspect="auto", extent=(0, seconds, 0, high / 1000), **scale)
            panel.tick_params(labelsize=6)
            if r == 0:
                panel.set_title(_column(axes, cell), fontsize=7)
            if c == 0 and len(axes) > 1:
                panel.set_ylabel(f"{cell.settings[0][0]} {cell.settings[0][1]:g}\nkHz", fontsize=7)
            if r == rows - 1:
                panel.set_xlabel("s", fontsize=6)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    with writing(png) as temp:
        figure.savefig(temp, dpi=80)
    plt.close(figure)
    folder = page.parent / f"{page.stem}_cells"
    for cell in cells:
        image = images[cell.path][0]
        with writing(folder / f"{cell.path.stem}.png") as temp:
            plt.imsave(temp, image[::-1], vmin=scale["vmin"], vmax=scale["vmax"], cmap="magma")
    write_text(page, _page(axes, grid, folder.name, png.name, title))


def _page(axes: list[Axis], grid: list[list[Cell]], folder: str, png: str, title: str) -> str:
    """The static page: a table of cells, each its spectrogram, a player and its figures."""
    e = html.escape
    head = "".join(f"<th>{e(_column(axes, cell))}</th>" for cell in grid[0])
    body = []
    for row in grid:
        label = f"<th>{e(row[0].settings[0][0])} {row[0].settings[0][1]:g}</th>"
        cells = []
        for cell in row:
            figures = ", ".join(f"{f} {cell.measured[f]:.3g}" for f in FEATURES)
            cells.append(
                f'<td><img src="{e(folder)}/{e(cell.path.stem)}.png" alt="{e(cell.path.name)}">'
                f'<br><audio controls preload="none" src="{e(cell.path.name)}"></audio>'
                f"<br><small>{e(figures)}</small></td>"
            )
        body.append(f"<tr>{label if len(axes) > 1 else ''}{''.join(cells)}</tr>")
    corner = f"<th>{e(axes[0].name)}</th>" if len(axes) > 1 else ""
    style = "td,th{padding:4px;text-align:center;font:12px sans-serif}img{width:220px;height:120px}"
    return (
        f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{e(title)}</title>"
        f"<style>{style}</style></head><body>\n<h1>{e(title)}</h1>\n"
        f"<p>Spectrograms up to {TOP_HZ / 1000:g} kHz, {RANGE_DB:g} dB range, one colour scale "
        f'for all cells. <a href="{e(png)}">Contact sheet (PNG)</a></p>\n'
        f"<table><tr>{corner}{head}</tr>\n" + "\n".join(body) + "\n</table></body></html>\n"
    )
