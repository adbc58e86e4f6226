"""A sweep directory as the figures read it: its trials and their axis values, labels, seed
pooling, training curves and preference evaluation (``ccjax.sweep.prefeval``)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ccjax.errors import ConfigError
from ccjax.sweep.ledger import read_parquet  # noqa: F401  (re-exported)

#: ``--by`` value that keeps one line per trial (no pooling)
BY_TRIAL = "trial"


@dataclass
class SweepTrials:
    """The ledger's trials of one sweep directory: ids in expansion order, their axis values
    (``point``) and status."""

    dir: Path
    ids: list[str]
    points: dict[str, dict[str, Any]]
    status: dict[str, str]

    @property
    def axes(self) -> list[str]:
        """The swept keys, in the spec's order."""
        keys: list[str] = []
        for t in self.ids:
            for k in self.points[t]:
                if k not in keys:
                    keys.append(k)
        return keys


def load_trials(sweep_dir: str | os.PathLike[str]) -> SweepTrials:
    from ccjax.sweep.ledger import Ledger

    d = Path(sweep_dir)
    if not d.is_dir():
        raise ConfigError(f"sweep_dir={str(d)!r} is invalid: no such directory")
    led = Ledger.existing(d)
    try:
        rows = led.rows()
    finally:
        led.close()
    return SweepTrials(dir=d, ids=[r["id"] for r in rows],
                       points={r["id"]: json.loads(r["point"]) for r in rows},
                       status={r["id"]: r["status"] for r in rows})


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, list | tuple):
        return "<" + ",".join(_fmt(x) for x in v) + ">"
    return str(v)


def axis_label(key: str, value: Any) -> str:
    """``hyper.lr`` = 0.001 -> ``lr=0.001``; a landmark step -> ``ω=36`` (MOCC's name for the
    number of landmarks, C(1/step - 1, 2))."""
    if key == "train.landmarks_step" and isinstance(value, int | float):
        n = round(1.0 / value) if value > 0 else 0
        if n >= 3 and math.isclose(1.0 / n, value, rel_tol=1e-6):
            return f"ω={(n - 1) * (n - 2) // 2}"
    return f"{key.rpartition('.')[2]}={_fmt(value)}"


def check_by(trials: SweepTrials, by: str | None) -> None:
    allowed = [BY_TRIAL, *trials.axes]
    if by is not None and by not in allowed:
        raise ConfigError(f"by={by!r} is invalid: one of {', '.join(allowed)} (the sweep's "
                          "axes, or trial for one line per trial)")


def label_keys(trials: SweepTrials, among: list[str], skip: tuple[str, ...] = ()) -> list[str]:
    """The axes that tell ``among`` apart, in the spec's order, less ``skip`` and less any
    axis the ones before it already determine (a linked axis's second key, e.g. ``n_envs``
    moving with ``landmarks_step``, or ``ent_end`` with ``ent_start``)."""

    def val(t: str, k: str) -> str:
        return json.dumps(trials.points[t].get(k), sort_keys=True)

    kept: list[str] = []
    for k in trials.axes:
        if k in skip or len({val(t, k) for t in among}) < 2:
            continue
        seen: dict[tuple[str, ...], str] = {}
        determined = bool(kept)
        for t in among:
            key = tuple(val(t, j) for j in kept)
            if seen.setdefault(key, val(t, k)) != val(t, k):
                determined = False
                break
        if not determined:
            kept.append(k)
    return kept


def label(trials: SweepTrials, tid: str, among: list[str], skip: tuple[str, ...] = ()) -> str:
    """A trial's name in a legend: the values of the axes that tell ``among`` apart
    (``label_keys``), else its id."""
    keys = label_keys(trials, among, skip)
    if not keys:
        return tid
    return ", ".join(axis_label(k, trials.points[tid].get(k)) for k in keys)


def groups(trials: SweepTrials, ids: list[str], by: str | None) -> list[tuple[str, list[str]]]:
    """Trials pooled into (label, ids) lines. ``by=None``: trials that differ only in ``seed``
    share a line; ``by=AXIS``: one line per value of that axis, every other axis pooled;
    ``by="trial"``: one line per trial. Lines keep the trials' order."""
    check_by(trials, by)
    out: dict[str, tuple[str, list[str]]] = {}
    for t in ids:
        p = trials.points[t]
        if by == BY_TRIAL:
            key, name = t, label(trials, t, ids)
        elif by is None:
            rest = {k: v for k, v in p.items() if k != "seed"}
            key = json.dumps(rest, sort_keys=True)
            name = label(trials, t, ids, skip=("seed",))
        else:
            key = json.dumps(p.get(by), sort_keys=True)
            name = axis_label(by, p.get(by))
        out.setdefault(key, (name, []))[1].append(t)
    return list(out.values())


def pooled(name: str, members: list[str], what: str = "seed") -> str:
    """A line's legend text: its name and how many trials it pools."""
    return name if len(members) == 1 else f"{name} ({len(members)} {what}s)"


# -- preference evaluation -----------------------------------------------------------------------
@dataclass
class Prefeval:
    """A sweep's preference evaluation: the settings (spec.json) and each trial's and
    controller's rows as numpy columns (``ccjax.sweep.prefeval.COLUMNS``)."""

    spec: dict[str, Any]
    trials: dict[str, dict[str, np.ndarray]]
    classic: dict[str, dict[str, np.ndarray]]

    def per_pref(self, cols: dict[str, np.ndarray], column: str, name: str = "") -> np.ndarray:
        """(N,) the column's mean over links at each preference. A link's NaN (a latency where
        the flow delivered nothing, ``ccjax.evaluate``) is left out, as ``evaluate``'s means
        leave it out; a preference without a finite value is NaN. A preference without any row
        (a truncated or foreign results file) is an error, not a mean of 0."""
        n = int(self.spec["preferences"])
        pref = cols["pref"].astype(int)
        missing = sorted(set(range(n)) - set(pref.tolist()))
        if missing:
            raise ConfigError(f"preference evaluation of {name or 'a trial'} is invalid: no rows "
                              f"for preference(s) {missing[:5]} of {n}; rerun `ccjax prefeval`")
        v = cols[column].astype(np.float64)
        ok = np.isfinite(v)
        s = np.bincount(pref[ok], weights=v[ok], minlength=n)
        c = np.bincount(pref[ok], minlength=n)
        return np.where(c > 0, s / np.maximum(c, 1), np.nan)


def load_prefeval(sweep_dir: str | os.PathLike[str]) -> Prefeval:
    from ccjax.sweep.prefeval import read_results

    spec, trials, classic = read_results(sweep_dir)
    return Prefeval(spec=spec, trials=trials, classic=classic)


def select(trials: SweepTrials, available: list[str], wanted: list[str] | None,
           max_all: int, score: dict[str, float] | None = None
           ) -> tuple[list[str], str]:
    """The trials a per-trial figure shows, and a note for its title. ``wanted`` (``--trial``):
    those, each checked; otherwise every trial with results when there are at most ``max_all``,
    else the one with the best ``score``."""
    if wanted:
        for t in wanted:
            if t not in trials.ids:
                raise ConfigError(f"trial={t!r} is invalid: not a trial of {str(trials.dir)!r}; "
                                  f"trials with results: {', '.join(available[:8])}"
                                  f"{' ...' if len(available) > 8 else ''}")
            if t not in available:
                raise ConfigError(f"trial={t!r} is invalid: it has no results in "
                                  f"{str(trials.dir)!r} (status {trials.status.get(t)})")
        return list(dict.fromkeys(wanted)), ""
    ordered = [t for t in trials.ids if t in available]
    if not ordered:
        raise ConfigError(f"sweep_dir={str(trials.dir)!r} is invalid: no trial of its ledger has "
                          "results here (run `ccjax prefeval` on it)")
    if len(ordered) <= max_all:
        return ordered, ""
    if not score:
        raise ConfigError(f"{len(ordered)} trials have results: choose up to {max_all} with "
                          "--trial ID")
    best = max(ordered, key=lambda t: score[t])
    return [best], f"best of {len(ordered)} trials by mean reward"


# -- training curves -----------------------------------------------------------------------------
def read_curves(sweep_dir: Path, ids: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """Each trial's curve (``curves/<id>.parquet``) as numpy columns (nulls as NaN)."""
    out = {}
    for t in ids:
        p = sweep_dir / "curves" / f"{t}.parquet"
        if p.is_file():
            tab = read_parquet(p, "curve")
            out[t] = {c: _numeric(tab.column(c).to_pylist()) for c in tab.column_names}
    return out


def _numeric(values: list[Any]) -> np.ndarray:
    try:
        return np.asarray([np.nan if v is None else float(v) for v in values], np.float64)
    except (TypeError, ValueError):
        return np.asarray(values, object)


def read_run(run_dir: Path) -> dict[str, np.ndarray]:
    """A ``ccjax train`` run directory as one curve: ``metrics.csv``'s columns, plus
    ``eval_<metric>`` from ``eval.csv`` (the mean over the evaluated preferences at each
    evaluation), aligned on ``iteration``."""
    import csv

    with open(run_dir / "metrics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ConfigError(f"run_dir={str(run_dir)!r} is invalid: metrics.csv has no rows yet")
    cols = {k: _numeric([_cell(r[k]) for r in rows]) for k in rows[0]}
    ev_path = run_dir / "eval.csv"
    if ev_path.is_file():
        with open(ev_path, newline="") as fh:
            ev = list(csv.DictReader(fh))
        its = cols["iteration"]
        for k in ("reward", "utilization", "latency_ratio", "loss_rate"):
            by_it: dict[float, list[float]] = {}
            for r in ev:
                v = _cell(r.get(k))
                if v is not None:
                    by_it.setdefault(float(r["iteration"]), []).append(float(v))
            cols[f"eval_{k}"] = np.asarray([np.mean(by_it[i]) if i in by_it else np.nan
                                            for i in its])
    return cols


def _cell(v: Any) -> Any:
    return None if v in (None, "") else v
