"""Training runs: schedules (``schedules``), setup (``setup``), the loop (``trainer``), the run
directory (``store``), and the two entry points the CLI calls: ``train`` and ``adapt``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ccjax.algos import AlgoConfig
from ccjax.envs.build import check_preference
from ccjax.errors import ConfigError
from ccjax.train.schedules import AllAtOnce, Fixed, TwoPhase, fmt
from ccjax.train.setup import build
from ccjax.train.store import Checkpoints
from ccjax.train.trainer import Trainer, check_max_iters, check_out

__all__ = ["adapt", "make_schedule", "train", "load_run"]


def make_schedule(cfg: AlgoConfig, seed: int = 0) -> Any:
    t = cfg.train
    n = t.get("n_envs", 1024)
    kind = t.get("schedule", "two-phase")
    common = dict(step=float(t.get("landmarks_step", 0.1)),
                  bootstrap_iters=t.get("bootstrap_iters", 300),
                  visit_iters=t.get("visit_iters", 5), max_cycles=t.get("max_cycles", 8),
                  min_cycles=t.get("min_cycles", 2),
                  converge_tol=float(t.get("converge_tol", 0.01)),
                  patience=t.get("patience", 2))
    if kind == "two-phase":
        return TwoPhase(n, **common)
    if kind == "all-at-once":
        return AllAtOnce(n, **common)
    pref = cfg.env.get("preference", (1 / 3, 1 / 3, 1 / 3))
    w = check_preference(pref, "env.preference")
    if "iters" not in t:
        raise ConfigError("train.iters is missing: the fixed schedule needs a number of "
                          "iterations (>= 1)")
    return Fixed(n, tuple(float(x) for x in w), t["iters"], t.get("eval_every", 8), seed=seed)


def train(cfg: AlgoConfig, out: str | Path, *, seed: int = 0, resume: bool = False,
          progress: bool = True, max_iters: int | None = None,
          log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train ``cfg`` into ``out`` (see ``ccjax.train.store`` for the layout)."""
    check_max_iters(max_iters)
    check_out(Path(out), resume)  # before anything is built or traced
    schedule = make_schedule(cfg, seed)
    setup = build(cfg, seed)
    return Trainer(setup, schedule, out, resume=resume, progress=progress, log=log).run(max_iters)


def load_run(run_dir: str | Path) -> tuple[AlgoConfig, int, dict[str, Any]]:
    """(config, seed, config.json) of a training run directory."""
    d = Path(run_dir)
    p = d / "config.json"
    if not p.is_file():
        raise ConfigError(f"from={str(d)!r} is invalid: not a training run (no config.json)")
    raw = json.loads(p.read_text())
    return AlgoConfig.from_dict(raw["algo"]), int(raw.get("seed", 0)), raw


def adapt(from_dir: str | Path, preference, out: str | Path | None = None, *,
          replay: bool = True, iters: int | None = None, seed: int | None = None,
          resume: bool = False, progress: bool = True, max_iters: int | None = None,
          log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Online adaptation (MOCC §4.3): continue the trained model of ``from_dir`` on a new
    preference; with ``replay``, half of every batch replays an old preference drawn from the
    stored pool (the source's landmarks and the preferences adapted to before), Eq. 6."""
    w = check_preference(preference)
    check_max_iters(max_iters)
    if iters is not None and (isinstance(iters, bool) or not isinstance(iters, int) or iters < 1):
        raise ConfigError(f"iters={iters!r} is invalid: an integer >= 1")
    cfg, src_seed, raw = load_run(from_dir)
    if cfg.agent.get("pref_dim", 3) != 3:
        raise ConfigError(f"from={str(from_dir)!r} is invalid: adaptation needs a model with "
                          "a preference input (pref_dim 3)")
    seed = src_seed if seed is None else seed
    src = Path(from_dir)
    if out is None:
        out = src / "adapt" / (fmt(w).strip("<>").replace(",", "-")
                               + ("" if replay else "-noreplay"))
    check_out(Path(out), resume)  # before the source's model is restored
    # the stored pool: the source's landmarks (or its one preference), then every preference
    # adapted to since (MOCC 4.3: "stores encountered applications")
    trained = np.asarray(make_schedule(cfg, src_seed).eval_prefs, np.float32).reshape(-1, 3)
    pool = [list(map(float, x)) for x in trained]
    for p in raw.get("meta", {}).get("pool", []):
        if list(map(float, p)) not in pool:
            pool.append(list(map(float, p)))
    pool_arr = np.asarray(pool, np.float32).reshape(-1, 3)
    n_iters = iters if iters is not None else cfg.train.get("adapt_iters", 200)
    setup = build(cfg, seed)
    # the trained model: the best-evaluated state (best/, what policy/ exports) when the run
    # recorded one, else its last checkpoint
    ck = None
    for sub in ("best", "checkpoints"):
        if (src / sub).is_dir():
            ck = Checkpoints(src / sub)
            if ck.latest() is not None:
                break
            ck.close()
            ck = None
    if ck is None:
        raise ConfigError(f"from={str(src)!r} is invalid: it has no checkpoint")
    fresh = setup.agent.init(jax.random.PRNGKey(0), setup.env.obs_dim, 1,
                             setup.hyper)
    from_iter = ck.latest()
    state, _ = ck.restore(fresh)
    ck.close()
    schedule = Fixed(setup.venv.n, tuple(float(x) for x in w), n_iters,
                     cfg.train.get("eval_every", 8), replay=pool_arr if replay else None,
                     probe=pool_arr, seed=seed, phase="adapt")
    meta = {"from": str(src.resolve()), "from_iteration": int(from_iter),
            "preference": [float(x) for x in w], "replay": replay, "iters": int(n_iters),
            "pool": pool + [[float(x) for x in w]]}
    return Trainer(setup, schedule, out, resume=resume, init_state=state, meta=meta,
                   progress=progress, log=log).run(max_iters)
