"""What every figure shares: the output path check, a style readable in a two-column paper,
and saving by the file's suffix."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ccjax.dirlock import nearest_folder
from ccjax.errors import ConfigError

FORMATS = (".png", ".pdf", ".svg")

#: font sizes for a figure printed about 3.5 to 7 inches wide (a paper's column or page)
STYLE = {"font.size": 10, "axes.labelsize": 10, "axes.titlesize": 10, "legend.fontsize": 8,
         "xtick.labelsize": 9, "ytick.labelsize": 9, "axes.grid": True, "grid.alpha": 0.3,
         "pdf.fonttype": 42, "ps.fonttype": 42}  # TrueType in PDFs: editable, accepted by venues


def check_plot_path(path: str | Path) -> Path:
    """``path`` as a ``Path`` if a plot can be written there, else a one-line ``ConfigError``:
    the suffix must name a format (``FORMATS``), the path must not be a folder, and the nearest
    folder that exists on the way to it must be a writable folder (``save`` creates the rest),
    and a file must open there for writing (tried, then undone). Checked before a run, so a long
    simulation does not end in a path error."""
    p = Path(path)
    if str(path) == "" or p.suffix.lower() not in FORMATS:
        raise ConfigError(f"plot={str(path)!r} is invalid: the file must end in "
                          f"{', '.join(FORMATS)}")
    if p.is_dir():
        raise ConfigError(f"plot={str(p)!r} is invalid: it is a folder; name a file in it")
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(f"plot={str(p)!r} is invalid: the file exists and is not writable")
    up, writable = nearest_folder(p)
    if not up.is_dir():
        raise ConfigError(f"plot={str(p)!r} is invalid: {up} is a file, not a folder")
    if not writable:
        raise ConfigError(f"plot={str(p)!r} is invalid: the folder {up} is not writable")
    try:
        _try_create(p, up)
    except OSError as e:
        raise ConfigError(f"plot={str(p)!r} is invalid: it cannot be written there "
                          f"({e.strerror or e})") from None
    return p


def _try_create(p: Path, up: Path) -> None:
    """Open ``p`` for writing as ``save`` will, leaving the file system as it was: root passes
    every ``os.access`` check, yet cannot create a file in /proc or /sys, and only trying tells.
    An existing file is opened to append nothing; otherwise a temporary file is tried in the
    folder the file will be in (a symbolic link followed, so a dangling link's target folder),
    or, where that folder is still to be made, in ``up``, the nearest folder that exists. The
    name ``p`` itself is never created or removed."""
    try_writable(p, up)


def try_writable(p: Path, up: Path | None = None) -> None:
    """Raise ``OSError`` unless a file can be written at ``p`` (see ``_try_create``)."""
    target = p.resolve()
    if target.exists():
        with target.open("ab"):
            pass
        return
    folder = target.parent if target.parent.is_dir() else up
    if folder is None:
        raise FileNotFoundError(f"no folder {target.parent}")
    with tempfile.TemporaryFile(dir=folder):
        pass


def pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend (figures go to files)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: str | Path, tight: bool = True) -> Path:
    """Write ``fig`` as PNG (200 dpi), PDF or SVG by the suffix, creating the directory, and
    close it. ``tight``: crop to what is drawn (legends outside the axes included)."""
    plt = pyplot()
    p = check_plot_path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=200, bbox_inches="tight" if tight else None)
    plt.close(fig)
    return p


def legend_texts(legend: Any) -> list[str]:
    """A legend's title (when it has one) and entries, as drawn."""
    title = legend.get_title().get_text()
    return ([title] if title else []) + [t.get_text() for t in legend.get_texts()]
