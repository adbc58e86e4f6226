"""The rich progress bar that training and sweeps show (one look, one set of columns)."""

from __future__ import annotations

from typing import Any


def make_progress(description: str = "{task.description}") -> Any:
    """A started-later ``rich.progress.Progress``: label, bar, n/total, elapsed, remaining and
    a free ``info`` field per task. Imported lazily: rich is only needed when a bar shows."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(TextColumn(f"[bold]{description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(),
                    TextColumn("{task.fields[info]}"), transient=False)
