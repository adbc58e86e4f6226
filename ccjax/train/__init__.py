"""Training runs: schedules (``schedules``), setup (``setup``), the loop (``trainer``), the run
directory (``store``), and the two entry points the CLI calls: ``train`` and ``adapt``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ccjax.algos import AlgoConfig
from ccjax.envs.build import check_preference
from ccjax.errors import ConfigError
from ccjax.train.schedules import AllAtOnce, Fixed, PerEpisode, TwoPhase, fmt
from ccjax.train.setup import build
from ccjax.train.store import CheckpointDamaged, Checkpoints
from ccjax.train.trainer import (
    Trainer,
    check_max_iters,
    check_out,
    check_resume,
    check_state,
    read_config,
)

__all__ = ["adapt", "check_options", "make_schedule", "train", "load_run"]

#: the keys only the landmark schedules read (``TwoPhase``, ``AllAtOnce``)
LANDMARK_KEYS = ("train.landmarks_step", "train.bootstrap_iters", "train.visit_iters",
                 "train.max_cycles", "train.min_cycles", "train.converge_tol", "train.patience")
#: the keys only the fixed schedule reads (a landmark schedule trains on its landmarks until
#: it converges or ends its cycles)
FIXED_KEYS = ("train.iters", "env.preference")


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
    if kind == "episode":
        from ccjax.envs.rewards import objective_names

        if "iters" not in t:
            raise ConfigError("train.iters is missing: the episode schedule needs a number of "
                              "iterations (>= 1)")
        k = len(objective_names(cfg.env.get("reward", "mocc")))
        return PerEpisode(n, k, t["iters"], t.get("eval_every", 8))
    from ccjax.envs.rewards import objective_names

    names = objective_names(cfg.env.get("reward", "mocc"))
    pref = cfg.env.get("preference", tuple([1.0 / len(names)] * len(names)))
    w = check_preference(pref, "env.preference", names=names)
    if "iters" not in t:
        raise ConfigError("train.iters is missing: the fixed schedule needs a number of "
                          "iterations (>= 1)")
    return Fixed(n, tuple(float(x) for x in w), t["iters"], t.get("eval_every", 8), seed=seed)


def check_options(cfg: AlgoConfig, overrides: bool = True) -> None:
    """Refuse a value given on top of the preset (a flag or ``--set``: ``cfg.overrides``) that
    the run's schedule or learner never reads, since config.json would record it as if it had
    shaped the run; and a landmark schedule whose landmarks would not all be trained
    (``sweep.spec._check_landmarks``, the rule sweeps apply). The preset's own values are not
    judged: a preset serves several schedules. ``overrides=False`` (a resume) skips the rules
    on given values: the run's own config.json then decides (``check_resume``)."""
    from ccjax.sweep.spec import _check_landmarks

    kind = cfg.train.get("schedule", "two-phase")
    given = cfg.overrides if overrides else {}
    for key, value in given.items():
        if kind == "episode" and key == "env.preference":
            raise ConfigError(f"{key}={value!r} is invalid with train.schedule='episode': "
                              "every episode draws its own preference from the simplex")
        if kind in ("fixed", "episode") and key in LANDMARK_KEYS:
            raise ConfigError(f"{key}={value!r} is invalid with train.schedule={kind!r}: only "
                              "the landmark schedules (two-phase, all-at-once) use it")
        if kind in ("two-phase", "all-at-once") and key in FIXED_KEYS:
            why = ("the landmarks are the training preferences" if key == "env.preference" else
                   "it trains until the landmark reward converges or train.max_cycles ends it")
            raise ConfigError(f"{key}={value!r} is invalid with train.schedule={kind!r}: only "
                              f"the fixed schedule uses it ({kind}: {why})")
    if ("env.preference" in given and cfg.agent.get("pref_dim", 3) == 0
            and cfg.env.get("reward", "mocc") == "aurora"):
        raise ConfigError(f"env.preference={given['env.preference']!r} is invalid with "
                          f"{cfg.name}'s agent.pref_dim=0 and env.reward='aurora': neither the "
                          "policy (no preference input) nor Aurora's reward reads it; with "
                          "env.reward='mocc' (--reward mocc) it is the reward's weights")
    if kind in ("two-phase", "all-at-once"):
        _check_landmarks(cfg, kind, "the run's config")


def train(cfg: AlgoConfig, out: str | Path, *, seed: int = 0, resume: bool = False,
          restart: bool = False, progress: bool = True, max_iters: int | None = None,
          log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train ``cfg`` into ``out`` (see ``ccjax.train.store`` for the layout). ``resume``
    continues the run there from its newest intact checkpoint; ``restart`` starts it over
    (its records removed); both hold the arguments to the run's config.json."""
    check_max_iters(max_iters)
    check_out(out, resume, restart)  # before anything is built or traced
    # a resumed run is held to its own config.json instead (``check_resume``): one started
    # before these rules may hold an option they refuse, and refusing it would strand the run
    check_options(cfg, overrides=not resume)
    schedule = make_schedule(cfg, seed)
    if resume or restart:  # the run's config.json against this one, before anything is built
        check_resume(out, {"algo": cfg.to_dict(), "seed": seed,
                           "schedule": type(schedule).__name__, "meta": {}})
    if resume:
        check_state(out)
    setup = build(cfg, seed)
    return Trainer(setup, schedule, out, resume=resume, restart=restart, progress=progress,
                   log=log).run(max_iters)


def load_run(run_dir: str | Path) -> tuple[AlgoConfig, int, dict[str, Any]]:
    """(config, seed, config.json) of a training run directory."""
    d = Path(run_dir)
    p = d / "config.json"
    if not p.is_file():
        raise ConfigError(f"from={str(d)!r} is invalid: not a training run (no config.json)")
    raw = read_config(p)
    return AlgoConfig.from_dict(raw["algo"]), int(raw.get("seed", 0)), raw


def adapt(from_dir: str | Path, preference, out: str | Path | None = None, *,
          replay: bool = True, iters: int | None = None, seed: int | None = None,
          resume: bool = False, restart: bool = False, progress: bool = True,
          max_iters: int | None = None,
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
    check_out(out, resume, restart)  # before the source's model is restored
    # the stored pool: the source's landmarks (or its one preference), then every preference
    # adapted to since (MOCC 4.3: "stores encountered applications")
    trained = np.asarray(make_schedule(cfg, src_seed).eval_prefs, np.float32).reshape(-1, 3)
    pool = [list(map(float, x)) for x in trained]
    for p in raw.get("meta", {}).get("pool", []):
        if list(map(float, p)) not in pool:
            pool.append(list(map(float, p)))
    pool_arr = np.asarray(pool, np.float32).reshape(-1, 3)
    n_iters = iters if iters is not None else cfg.train.get("adapt_iters", 200)
    meta = {"from": str(src.resolve()), "preference": [float(x) for x in w], "replay": replay,
            "iters": int(n_iters), "pool": pool + [[float(x) for x in w]]}
    if resume or restart:  # the adaptation's config.json against this one, before anything is built
        check_resume(out, {"algo": cfg.to_dict(), "seed": seed, "schedule": Fixed.__name__,
                           "meta": meta})
    if resume:
        check_state(out)
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
    fresh = setup.agent.init(jax.random.PRNGKey(0), setup.env.spec, setup.hyper)
    from_iter = ck.latest()
    try:
        state, _ = ck.restore(fresh)
    except CheckpointDamaged as e:
        raise ConfigError(f"from={str(src)!r} is invalid: its model cannot be restored ({e})"
                          ) from None
    finally:
        ck.close()
    schedule = Fixed(setup.venv.n, tuple(float(x) for x in w), n_iters,
                     cfg.train.get("eval_every", 8), replay=pool_arr if replay else None,
                     probe=pool_arr, seed=seed, phase="adapt")
    meta = {"from": meta["from"], "from_iteration": int(from_iter),
            **{k: v for k, v in meta.items() if k != "from"}}
    return Trainer(setup, schedule, out, resume=resume, restart=restart, init_state=state,
                   meta=meta, progress=progress, log=log).run(max_iters)
