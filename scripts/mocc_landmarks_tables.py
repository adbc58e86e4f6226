"""Print the tables of docs/results/mocc-landmarks.md (MOCC Figure 16 in simulation) from a
finished ``sweeps/mocc-landmarks.toml`` sweep directory: training per ω from the ledger, and the
reward distribution per ω over the preference evaluation (``ccjax prefeval``: N preferences x M
links, one row each, in ``SWEEP_DIR/prefeval/``), with the classic controllers on the same rows.

    python scripts/mocc_landmarks_tables.py SWEEP_DIR [--load LOADFILE]

``--load``: a file of ``unix_time load1 load5 load15 ...`` lines (``/proc/loadavg`` sampled while
the sweep ran); each trial's row then gives the 1-minute load average over its batch.
Reads only; every number printed comes from the directory (and the load file).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from ccjax.agents.landmarks import simplex_grid


def _trials(d: Path) -> list[dict]:
    db = sqlite3.connect(d / "ledger.sqlite")
    db.row_factory = sqlite3.Row
    rows = [dict(r) for r in db.execute("SELECT * FROM trials ORDER BY idx")]
    db.close()
    for r in rows:
        cfg = json.loads(r["config"])
        r["step"] = float(cfg["train"]["landmarks_step"])
        r["omega"] = len(simplex_grid(r["step"]))
        r["n_envs"] = int(cfg["train"]["n_envs"])
        r["seed"] = int(cfg["seed"])
        r["m"] = json.loads(r["metrics"]) if r["metrics"] else {}
    return rows


def _load(path: Path | None, t0: float, t1: float) -> str:
    if path is None:
        return ""
    vals = [float(ln.split()[1]) for ln in path.read_text().splitlines()
            if ln.strip() and t0 <= float(ln.split()[0]) <= t1]
    return f"{np.mean(vals):.1f}" if vals else "n/a"


def _rewards(path: Path) -> np.ndarray:
    return np.asarray(pq.read_table(path, columns=["reward"]).column("reward").to_pylist(),
                      float)


def training_table(rows: list[dict], load: Path | None) -> list[str]:
    head = ("| ω | step | envs (per landmark) | best mean landmark reward (iteration) | "
            "iter_99 | train s to iter_99 | train s (600 it.) | s / iteration | compile s | "
            "eval s | wall s |" + (" load (1 min) |" if load else ""))
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        it = r["iterations"] or 0
        out.append(
            f"| {r['omega']} | 1/{round(1 / r['step'])} | {r['n_envs']} "
            f"({r['n_envs'] // r['omega']}) | {r['best_reward']:.4f} ({r['best_iteration']}) | "
            f"{r['iter_99']} | {r['train_99_s']:.0f} | {r['train_s']:.0f} | "
            f"{r['train_s'] / max(it, 1):.3f} | {r['compile_s']:.0f} | {r['eval_s']:.0f} | "
            f"{r['ended'] - r['started']:.0f} |"
            + (f" {_load(load, r['started'], r['ended'])} |" if load else ""))
    return out


def evals_table(rows: list[dict]) -> list[str]:
    its = [e["iteration"] for e in rows[0]["m"].get("evals", [])]
    out = ["| ω | " + " | ".join(str(i) for i in its) + " |", "|---|" + "---|" * len(its)]
    for r in rows:
        ev = {e["iteration"]: e["reward"] for e in r["m"].get("evals", [])}
        out.append(f"| {r['omega']} | " + " | ".join(
            f"{ev[i]:.3f}" if ev.get(i) is not None else "" for i in its) + " |")
    return out


def prefeval_table(d: Path, rows: list[dict]) -> list[str]:
    pe = d / "prefeval"
    spec = json.loads((pe / "spec.json").read_text())
    out = [f"{spec.get('preferences')} preferences x {spec.get('links')} links of "
           f"`{spec.get('scenario')}` ({spec.get('model')} model, {spec.get('duration_s')} s "
           f"per link, seed {spec.get('seed')}): one reward per (preference, link).", "",
           "| method | rows | median | 10th pct | mean | 90th pct | share of rows > 0.8 |",
           "|---|---|---|---|---|---|---|"]
    means = {}
    for r in rows:
        p = pe / f"{r['id']}.parquet"
        if not p.is_file():
            out.append(f"| MOCC ω = {r['omega']} | (not evaluated) | | | | | |")
            continue
        x = _rewards(p)
        means[r["omega"]] = x.mean()
        out.append(_dist_row(f"MOCC ω = {r['omega']}", x))
    for p in sorted((pe / "classic").glob("*.parquet")):
        out.append(_dist_row(p.stem, _rewards(p)))
    if 36 in means:
        out += ["", "Mean reward of ω = 36 over the mean reward of each ω (MOCC reports 3x, "
                "1.5x, 1.2x over ω = 3, 6, 12): " + ", ".join(
                    f"ω = {o}: {means[36] / v:.3f}x" for o, v in means.items() if o != 36)]
    return out


#: regions of the preference simplex: central, and near each corner (one weight >= 0.6)
REGIONS = (("central (every w < 0.5)", None), ("w_thr >= 0.6", 0), ("w_lat >= 0.6", 1),
           ("w_loss >= 0.6", 2))


def region_table(d: Path, rows: list[dict]) -> list[str]:
    """Median (10th percentile) reward per region of the simplex: does a coarse landmark grid
    lose where it has no landmark (near the corners)?"""
    pe = d / "prefeval"
    files = [(f"MOCC ω = {r['omega']}", pe / f"{r['id']}.parquet") for r in rows]
    files += [(p.stem, p) for p in sorted((pe / "classic").glob("*.parquet"))]
    out, counted = [], False
    for name, path in files:
        if not path.is_file():
            continue
        t = pq.read_table(path, columns=["pref", "w_thr", "w_lat", "w_loss", "reward"])
        w = np.stack([np.asarray(t.column(c).to_pylist(), float)
                      for c in ("w_thr", "w_lat", "w_loss")], 1)
        r = np.asarray(t.column("reward").to_pylist(), float)
        pref = np.asarray(t.column("pref").to_pylist())
        masks = [w.max(1) < 0.5 if k is None else (w[:, k] >= 0.6) for _, k in REGIONS]
        if not counted:
            out = ["| method | " + " | ".join(
                f"{lab} ({len(np.unique(pref[m]))} prefs)" for (lab, _), m in
                zip(REGIONS, masks, strict=True)) + " |", "|---|" + "---|" * len(REGIONS)]
            counted = True
        out.append(f"| {name} | " + " | ".join(
            f"{np.median(r[m]):.3f} ({np.percentile(r[m], 10):.3f})" if m.any() else ""
            for m in masks) + " |")
    return out


def _dist_row(name: str, x: np.ndarray) -> str:
    x = x[np.isfinite(x)]
    return (f"| {name} | {x.size} | {np.median(x):.4f} | {np.percentile(x, 10):.4f} | "
            f"{x.mean():.4f} | {np.percentile(x, 90):.4f} | {np.mean(x > 0.8):.3f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument("--load", type=Path, help="a /proc/loadavg log taken during the sweep")
    a = ap.parse_args(argv)
    rows = [r for r in _trials(a.sweep_dir) if r["status"] == "done"]
    print("### Training per ω\n")
    print("\n".join(training_table(rows, a.load)))
    print("\n### Mean landmark reward at each evaluation (training-range links)\n")
    print("\n".join(evals_table(rows)))
    if (a.sweep_dir / "prefeval" / "spec.json").is_file():
        print("\n### Reward over the preference evaluation\n")
        print("\n".join(prefeval_table(a.sweep_dir, rows)))
        print("\n### Median (10th percentile) reward by region of the preference simplex\n")
        print("\n".join(region_table(a.sweep_dir, rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
