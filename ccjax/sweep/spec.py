"""Sweep specifications (``sweeps/*.toml``): parse, validate, expand into trials, group them.

A spec names an algorithm preset, base overrides for every trial, and the axes to sweep::

    name = "ppo-mocc-hparams"
    algo = "ppo-mocc"                 # preset name (algos/) or a path to a preset TOML

    [set]                             # every trial: table.key = value, as `ccjax train --set`
    train.schedule = "fixed"
    train.iters = 300
    env.preference = [0.45, 0.35, 0.2]

    [axes]                            # a grid: the Cartesian product, last key fastest
    hyper.lr = [3e-4, 1e-3]
    entropy = [{hyper.ent_start = 0.01, hyper.ent_end = 0.001},   # a *linked* axis: a name
               {hyper.ent_start = 0.1, hyper.ent_end = 0.01}]     # and a list of tables
    seed = [0, 1, 2, 3]

    [random]                          # n samples, crossed with the grid
    n = 8
    seed = 0                          # the sampling seed
    hyper.clip = {uniform = [0.1, 0.3]}
    hyper.lr = {log_uniform = [1e-4, 3e-3]}
    hyper.gamma = {choice = [0.98, 0.99]}

    [sweep]
    pool_seed = 0                     # the training link pool and the evaluation links
    batch = 0                         # trials per compiled batch; 0: from device memory
    eval_every = 0                    # iterations between evaluations (0: only at the end)

    [prefeval]                        # optional: after training, every trial's policy on
    preferences = 100                 # uniform simplex preferences x scenario links, and
    links = 10                        # classic controllers on the same links
    scenario = "mocc-test"            # (keys and defaults: ccjax.sweep.prefeval)

Keys are ``table.key`` of the preset schema (``ccjax.algos.SCHEMA``) or ``seed``. A trial is the
preset with ``[set]``, then its grid point, then its random sample applied; every value is checked
by the preset's own schema, so a bad value or unknown key is a one-line ``ConfigError`` naming it,
raised by ``load_spec`` before anything is traced.

Dynamic and static keys (DESIGN principle 2): ``hyper.*``, ``seed`` and ``env.preference`` change
no shape, so trials that differ only there share one compiled program (``ccjax.sweep.batch``).
Any other key (``agent.hidden``, ``train.n_envs``, ``env.scenario``, ...) is static: trials are
grouped by the static part of their config and each group compiles its own program.

Schedules (``ccjax.sweep.schedule``): ``train.schedule`` may be ``fixed`` (every environment on
``env.preference``), ``all-at-once`` or ``two-phase`` (MOCC's landmarks, 3 objectives), or
``episode`` (AUTO: every episode draws its own preference); with any but ``fixed``,
``env.preference`` is an error, the schedule choosing the training preferences. A preference has
one weight per objective of the trial's reward (``env.reward``: 3 for MOCC's, 2 for AUTO's). Any
registered agent (``agent.kind``, ``ccjax.agents.registry``) can be swept. Every trial trains
``train.iters`` iterations: a batch's trials share one program, so there is no convergence
stop, and ``ccjax train``'s stopping keys (``max_cycles``, ``min_cycles``, ``converge_tol``,
``patience``) are not used; neither are ``train.eval_every`` (``sweep.eval_every`` is the
period), ``train.checkpoint_every`` and ``train.adapt_iters``. Setting any of them in a spec or
by ``--set`` is an error (``IGNORED_KEYS``). ``train.landmarks_step`` is static (it fixes ω, the
number of evaluation preferences), so a landmark-step axis makes one group per step.

Trial ids are the first 12 hex digits of the SHA-256 of the trial's resolved configuration
(preset tables, seed, pool seed, evaluation period): deterministic, so a resumed sweep finds
its trials again, and a changed preset gives new ids rather than silently reusing results
trained under the old one.
"""

from __future__ import annotations

import contextvars
import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ccjax.algos import SCHEMA, AlgoConfig, check_value, load_algo
from ccjax.errors import ConfigError

#: keys whose values change no shape: trials differing only here share a compiled program
DYNAMIC_TABLE = "hyper"
DYNAMIC_KEYS = ("seed", "env.preference")
DISTRIBUTIONS = ("uniform", "log_uniform", "choice")
SWEEP_KEYS = {"pool_seed": "an integer >= 0", "batch": "an integer >= 0 (0: automatic)",
              "eval_every": "an integer >= 0 (0: evaluate only at the end)"}
TOP_KEYS = ("name", "description", "algo", "set", "axes", "random", "sweep", "prefeval")
#: preset keys a sweep never reads, and why: set in a spec or by --set they would be recorded
#: (in the trial's config and id) as if they shaped the trial
IGNORED_KEYS = dict.fromkeys(
    ("train.max_cycles", "train.min_cycles", "train.converge_tol", "train.patience"),
    "a sweep trains every trial for train.iters iterations with no convergence stop; "
    "`ccjax train`'s stopping keys (max_cycles, min_cycles, converge_tol, patience) are not "
    "used") | {
    "train.eval_every": "a sweep evaluates every sweep.eval_every iterations ([sweep] table)",
    "train.checkpoint_every": "a sweep checkpoints a batch as its trials end",
    "train.adapt_iters": "only `ccjax adapt` reads it, from a `ccjax train` run"}


@dataclass(frozen=True)
class Trial:
    """One training run of a sweep."""

    index: int  # position in the expansion (grid order, then random samples)
    id: str  # 12 hex digits of the hash of the resolved config
    group: str  # id of its static group (trials of a group share a compiled program)
    point: dict[str, Any]  # the axis values that define it, e.g. {"hyper.lr": 3e-4, "seed": 1}
    seed: int
    cfg: AlgoConfig

    @property
    def preference(self) -> tuple[float, ...]:
        """``env.preference`` (K weights), or equal weights where the config sets none."""
        from ccjax.sweep.schedule import default_preference, n_objectives

        w = self.cfg.env.get("preference", default_preference(n_objectives(self.cfg)))
        return tuple(float(x) for x in w)

    def config_json(self) -> dict[str, Any]:
        """What the ledger stores: the resolved preset tables, the seed and the point."""
        return {"algo": self.cfg.name, "seed": self.seed, "point": self.point,
                "agent": self.cfg.agent, "hyper": self.cfg.hyper, "env": self.cfg.env,
                "train": self.cfg.train}


@dataclass(frozen=True)
class SweepSpec:
    name: str
    algo: str
    path: str
    description: str = ""
    base: dict[str, Any] = field(default_factory=dict)  # [set], flattened
    grid: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)  # axis -> values
    random: dict[str, Any] = field(default_factory=dict)  # key -> distribution table
    n_random: int = 0
    random_seed: int = 0
    pool_seed: int = 0
    batch: int = 0
    eval_every: int = 0
    prefeval: Any = None  # ccjax.sweep.prefeval.PrefevalSpec: evaluate after training
    trials: list[Trial] = field(default_factory=list)

    def groups(self) -> dict[str, list[Trial]]:
        """Trials by static group, in expansion order."""
        out: dict[str, list[Trial]] = {}
        for t in self.trials:
            out.setdefault(t.group, []).append(t)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "algo": self.algo, "path": self.path, "base": self.base,
                "grid": self.grid, "random": self.random, "n_random": self.n_random,
                "random_seed": self.random_seed, "pool_seed": self.pool_seed,
                "eval_every": self.eval_every, "trials": [t.id for t in self.trials],
                **({"prefeval": self.prefeval.to_json()} if self.prefeval is not None else {})}


def presets_dir() -> Path:
    from ccjax.presets import presets_dir as where

    return where("sweeps")


def list_sweeps() -> list[str]:
    d = presets_dir()
    return sorted(p.stem for p in d.glob("*.toml")) if d.is_dir() else []


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _flatten(table: Any, where: str, leaf_dicts: bool = False) -> dict[str, Any]:
    """``{"hyper": {"lr": x}, "seed": 0}`` -> ``{"hyper.lr": x, "seed": 0}``: TOML turns the
    dotted keys of a spec into nested tables; a sweep key is exactly ``table.key`` or ``seed``.
    With ``leaf_dicts`` a dict under ``table.key`` is a value (a distribution), not a table."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} is invalid: a table of table.key = value")
    out: dict[str, Any] = {}
    for k, v in table.items():
        if k == "seed":
            out["seed"] = v
        elif k in SCHEMA and isinstance(v, dict):
            for kk, vv in v.items():
                if isinstance(vv, dict) and not leaf_dicts:
                    raise ConfigError(f"{where} key {k}.{kk} is invalid: a value, not a table")
                out[f"{k}.{kk}"] = vv
        elif "." in k and k.partition(".")[0] in SCHEMA:  # quoted "hyper.lr" = ...
            out[k] = v
        else:
            raise ConfigError(f"{where} key {k!r} is invalid: use table.key with table one of "
                              f"{', '.join(SCHEMA)}, or seed")
    return out


#: set while loading a spec to resume a sweep (``load_spec(..., resuming=True)``): a sweep
#: started before ``IGNORED_KEYS`` were refused may hold them, and they are part of its trials'
#: ids, so refusing them then would strand its finished trials
_RESUMING: contextvars.ContextVar[bool] = contextvars.ContextVar("resuming", default=False)


def _check(key: str, value: Any, where: str) -> Any:
    """One value through the preset schema (the same checks ``load_algo`` applies)."""
    if key in IGNORED_KEYS and not _RESUMING.get():
        raise ConfigError(f"{key}={value!r} is invalid in {where}: {IGNORED_KEYS[key]}")
    if key == "seed":
        if not (_is_int(value) and value >= 0):
            raise ConfigError(f"seed={value!r} is invalid in {where}: an integer >= 0")
        return value
    t, _, k = key.partition(".")
    value = check_value(t, k, value, where)
    if key == "env.preference":
        from ccjax.envs.build import check_preference
        from ccjax.envs.rewards import OBJECTIVES

        # the reward (and so K) is known only once the trial is resolved (_check_runnable);
        # here the value is a simplex point of the length it has (the schema allows 2 or 3)
        names = OBJECTIVES["mocc"] if len(value) == 3 else OBJECTIVES["auto"]
        try:
            check_preference(value, "env.preference", names)
        except ConfigError as e:
            raise ConfigError(f"{e} (in {where})") from None
    return value


def _parse_grid(axes: Any, where: str) -> list[tuple[str, list[dict[str, Any]]]]:
    if not isinstance(axes, dict):
        raise ConfigError(f"{where} is invalid: [axes] must be a table")
    grid: list[tuple[str, list[dict[str, Any]]]] = []
    seen: set[str] = set()
    for name, v in axes.items():
        if name in SCHEMA or name == "seed":
            plain = _flatten({name: v}, f"{where} [axes]")
            items = [(k, vals) for k, vals in plain.items()]
            for k, vals in items:
                if not isinstance(vals, list) or not vals:
                    raise ConfigError(f"axes.{k}={vals!r} is invalid in {where}: a non-empty "
                                      "list of values")
                grid.append((k, [{k: _check(k, x, f"{where} [axes]")} for x in vals]))
        elif "." in name and name.partition(".")[0] in SCHEMA:
            if not isinstance(v, list) or not v:
                raise ConfigError(f"axes.{name}={v!r} is invalid in {where}: a non-empty list "
                                  "of values")
            grid.append((name, [{name: _check(name, x, f"{where} [axes]")} for x in v]))
        elif "." in name:
            raise ConfigError(f"axes key {name!r} is invalid in {where}: use table.key with "
                              f"table one of {', '.join(SCHEMA)}, or seed")
        else:
            # a linked axis: several keys that move together (e.g. an entropy schedule)
            if not (isinstance(v, list) and v and all(isinstance(x, dict) for x in v)):
                raise ConfigError(f"axes.{name} is invalid in {where}: a table.key axis, seed, "
                                  "or a linked axis (a list of tables of table.key = value)")
            vals = [_flatten(x, f"{where} [axes] {name}") for x in v]
            keys = set(vals[0])
            for x in vals:
                if set(x) != keys:
                    raise ConfigError(f"axes.{name} is invalid in {where}: every table must "
                                      f"set the same keys ({', '.join(sorted(keys))})")
            grid.append((name, [{k: _check(k, val, f"{where} [axes] {name}")
                                 for k, val in x.items()} for x in vals]))
        for k in grid[-1][1][0]:
            if k in seen:
                raise ConfigError(f"axes key {k} is invalid in {where}: swept twice")
            seen.add(k)
    return grid


def _parse_random(rand: Any, where: str) -> tuple[dict[str, Any], int, int]:
    if not isinstance(rand, dict):
        raise ConfigError(f"{where} is invalid: [random] must be a table")
    rand = dict(rand)
    n = rand.pop("n", None)
    seed = rand.pop("seed", 0)
    if not (_is_int(n) and n >= 1):
        raise ConfigError(f"random.n={n!r} is invalid in {where}: the number of samples, an "
                          "integer >= 1")
    if not (_is_int(seed) and seed >= 0):
        raise ConfigError(f"random.seed={seed!r} is invalid in {where}: an integer >= 0")
    dists = _flatten(rand, f"{where} [random]", leaf_dicts=True)
    if not dists:
        raise ConfigError(f"[random] is invalid in {where}: no key to sample")
    for k, d in dists.items():
        if k == "seed" or not isinstance(d, dict) or len(d) != 1 or next(iter(d)) not in \
                DISTRIBUTIONS:
            raise ConfigError(f"random.{k}={d!r} is invalid in {where}: one of "
                              "{uniform = [lo, hi]}, {log_uniform = [lo, hi]}, "
                              "{choice = [v, ...]}")
        kind, arg = next(iter(d.items()))
        if kind == "choice":
            if not isinstance(arg, list) or not arg:
                raise ConfigError(f"random.{k}.choice={arg!r} is invalid in {where}: a "
                                  "non-empty list")
            for x in arg:
                _check(k, x, f"{where} [random]")
            continue
        ok = (isinstance(arg, list) and len(arg) == 2
              and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                      and math.isfinite(x) for x in arg) and arg[0] <= arg[1])
        if ok and kind == "log_uniform":
            ok = arg[0] > 0
        if not ok:
            raise ConfigError(f"random.{k}.{kind}={arg!r} is invalid in {where}: [lo, hi] with "
                              f"{'0 < ' if kind == 'log_uniform' else ''}lo <= hi")
        if SCHEMA[k.partition(".")[0]].get(k.partition(".")[2], (None,))[0] is int:
            raise ConfigError(f"random.{k}.{kind} is invalid in {where}: {k} is an integer; "
                              "sample it with {choice = [...]}")
        # both ends must be valid values themselves (a range reaching clip = 1 is not)
        for x in arg:
            _check(k, float(x), f"{where} [random]")
    return dists, n, seed


def _sample(dists: dict[str, Any], n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` samples, drawn in spec order from one generator: the same spec gives the same
    samples on every machine (numpy's PCG64)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        s: dict[str, Any] = {}
        for k, d in dists.items():
            kind, arg = next(iter(d.items()))
            if kind == "choice":
                s[k] = arg[int(rng.integers(len(arg)))]
            elif kind == "uniform":
                s[k] = float(rng.uniform(arg[0], arg[1]))
            else:
                s[k] = float(math.exp(rng.uniform(math.log(arg[0]), math.log(arg[1]))))
        out.append(s)
    return out


def _digest(obj: Any, n: int = 12) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def static_key(cfg: AlgoConfig) -> dict[str, Any]:
    """The part of a config that fixes the compiled program's shapes and code paths."""
    env = {k: v for k, v in cfg.env.items() if k != "preference"}
    return {"algo": cfg.name, "agent": cfg.agent, "env": env, "train": cfg.train}


def load_spec(name_or_path: str | os.PathLike[str],
              overrides: dict[str, Any] | None = None, *, resuming: bool = False) -> SweepSpec:
    """Load, validate and expand a spec: by name (``sweeps/<name>.toml``) or by path. Every
    trial's config is resolved and checked here, before anything is traced. ``overrides``
    (``{"train.iters": 20}``, ``ccjax sweep --set``) apply on top of the spec's ``[set]``.
    ``resuming``: the spec is to resume a sweep, which may predate the refusal of
    ``IGNORED_KEYS`` (the runner still requires the very trials the ledger holds)."""
    token = _RESUMING.set(resuming)
    try:
        return _load_spec(name_or_path, overrides)
    finally:
        _RESUMING.reset(token)


def _load_spec(name_or_path: str | os.PathLike[str],
               overrides: dict[str, Any] | None) -> SweepSpec:
    s = os.fspath(name_or_path)
    if s.endswith(".toml") or "/" in s or os.sep in s:
        path = Path(s)
        if not path.is_file():
            raise ConfigError(f"spec={s!r} is invalid: file not found")
    else:
        path = presets_dir() / f"{s}.toml"
        if not path.is_file():
            raise ConfigError(f"spec={s!r} is invalid: no such sweep; available: "
                              f"{', '.join(list_sweeps()) or '(none)'} (or a path to a .toml)")
    from ccjax.presets import read_toml

    data = read_toml(path, s)
    return spec_from_dict(data, path.name, str(path), overrides)


def spec_from_dict(data: dict[str, Any], where: str = "spec", path: str = "",
                   overrides: dict[str, Any] | None = None) -> SweepSpec:
    """``load_spec`` for an already parsed TOML document."""
    extra = sorted(set(data) - set(TOP_KEYS))
    if extra:
        raise ConfigError(f"{where} is invalid: unknown key {extra[0]!r}; allowed: "
                          f"{', '.join(TOP_KEYS)}")
    algo = data.get("algo")
    if not isinstance(algo, str) or not algo:
        raise ConfigError(f"algo is invalid in {where}: name an algorithm preset "
                          "(e.g. algo = \"ppo-mocc\") or a preset TOML path")
    if algo.endswith(".toml") and path and not Path(algo).is_absolute():
        algo = str(Path(path).parent / algo)  # a preset path is relative to the spec
    base = _flatten(data.get("set", {}), f"{where} [set]")
    for k, v in base.items():
        _check(k, v, f"{where} [set]")
    for k, v in (overrides or {}).items():
        t = k.partition(".")[0]
        if k != "seed" and (t not in SCHEMA or "." not in k):
            raise ConfigError(f"set {k!r} is invalid: use table.key with table one of "
                              f"{', '.join(SCHEMA)}, or seed")
        base[k] = _check(k, v, "--set")
    grid = _parse_grid(data.get("axes", {}), where)
    dists, n_rand, rseed = ({}, 0, 0)
    if "random" in data:
        dists, n_rand, rseed = _parse_random(data["random"], where)
    swept = {k for _, vals in grid for k in vals[0]}
    both = sorted(swept & set(dists))
    if both:
        raise ConfigError(f"{both[0]} is invalid in {where}: both on a grid axis and sampled")
    clash = sorted(set(overrides or {}) & (swept | set(dists)))
    if clash:
        raise ConfigError(f"set {clash[0]} is invalid: {where} sweeps it (on an axis or "
                          "sampled); a --set value would replace the axis")
    sw = data.get("sweep", {})
    if not isinstance(sw, dict):
        raise ConfigError(f"{where} is invalid: [sweep] must be a table")
    for k, v in sw.items():
        if k not in SWEEP_KEYS:
            raise ConfigError(f"sweep.{k} is invalid in {where}: unknown key; allowed: "
                              f"{', '.join(SWEEP_KEYS)}")
        if not (_is_int(v) and v >= 0):
            raise ConfigError(f"sweep.{k}={v!r} is invalid in {where}: {SWEEP_KEYS[k]}")
    pe = None
    if "prefeval" in data:  # preference evaluation after training (ccjax.sweep.prefeval)
        from ccjax.sweep.prefeval import parse_prefeval

        pe = parse_prefeval(data["prefeval"], f"{where} [prefeval]")
    spec = SweepSpec(name=str(data.get("name", Path(path).stem if path else "sweep")),
                     algo=algo, path=path, description=str(data.get("description", "")),
                     base=base, grid=grid, random=dists, n_random=n_rand, random_seed=rseed,
                     pool_seed=sw.get("pool_seed", 0), batch=sw.get("batch", 0),
                     eval_every=sw.get("eval_every", 0), prefeval=pe)
    object.__setattr__(spec, "trials", expand(spec, where))
    if pe is not None:
        from ccjax.sweep.schedule import n_objectives

        other = next((t for t in spec.trials if n_objectives(t.cfg) != 3), None)
        if other is not None:
            # ccjax.sweep.prefeval draws MOCC's preferences and scores by MOCC's reward
            raise ConfigError(f"[prefeval] is invalid in {where} with env.reward="
                              f"{other.cfg.env.get('reward')!r}: the preference evaluation "
                              f"is MOCC's, over 3 objectives; the reward has "
                              f"{n_objectives(other.cfg)}")
    return spec


def expand(spec: SweepSpec, where: str = "spec") -> list[Trial]:
    """Grid points (Cartesian product, the last axis fastest) x random samples, each resolved
    through ``load_algo`` and checked for what ``ccjax sweep`` runs."""
    points: list[dict[str, Any]] = []
    for combo in itertools.product(*[vals for _, vals in spec.grid]):
        p: dict[str, Any] = {}
        for d in combo:
            p.update(d)
        points.append(p)
    if spec.n_random:
        samples = _sample(spec.random, spec.n_random, spec.random_seed)
        points = [{**p, **s} for p in points for s in samples]
    trials: list[Trial] = []
    seen: dict[str, int] = {}
    for i, p in enumerate(points):
        ov = {**spec.base, **p}
        seed = int(ov.pop("seed", 0))
        cfg = load_algo(spec.algo, ov)
        _check_runnable(cfg, where)
        # everything that changes what the trial computes or records (not the batch size)
        resolved = {"algo": cfg.name, "agent": cfg.agent, "hyper": cfg.hyper, "env": cfg.env,
                    "train": cfg.train, "seed": seed, "pool_seed": spec.pool_seed,
                    "eval_every": spec.eval_every}
        tid = _digest(resolved)
        if tid in seen:
            raise ConfigError(f"axes are invalid in {where}: trials {seen[tid]} and {i} have the "
                              f"same configuration ({json.dumps(p, sort_keys=True)})")
        seen[tid] = i
        trials.append(Trial(index=i, id=tid, group="g" + _digest(
            {**static_key(cfg), "pool_seed": spec.pool_seed}, 8), point=p, seed=seed, cfg=cfg))
    return trials


def _check_runnable(cfg: AlgoConfig, where: str) -> None:
    """What the sweep engine supports, as one-line errors (``ccjax.sweep.schedule``)."""
    from ccjax.sweep.schedule import SCHEDULES

    t = cfg.train
    sched = t.get("schedule", "two-phase")
    if sched not in SCHEDULES:  # pragma: no cover - the preset schema allows no other
        raise ConfigError(f"train.schedule={sched!r} is invalid in {where}: one of "
                          f"{', '.join(SCHEDULES)}")
    if "iters" not in t:
        raise ConfigError(f"train.iters is missing in {where}: the number of iterations each "
                          "trial trains (a sweep trains every schedule, landmark schedules "
                          "too, for a fixed budget: no convergence stop)")
    if t.get("shard", False):
        raise ConfigError(f"train.shard=true is invalid in {where}: a sweep batches trials on "
                          "one device; sharding environments is not supported there")
    from ccjax.envs.build import check_preference
    from ccjax.envs.rewards import OBJECTIVES
    from ccjax.sim.scenario import load_scenario
    from ccjax.sweep.schedule import LANDMARK_SCHEDULES, default_preference

    names = OBJECTIVES.get(cfg.env.get("reward", "mocc"), OBJECTIVES["mocc"])
    if sched != "fixed":
        if "preference" in cfg.env:
            what = ("the landmarks are the training preferences" if sched in LANDMARK_SCHEDULES
                    else "every episode draws its own preference from the simplex")
            raise ConfigError(f"env.preference is invalid in {where} with train.schedule="
                              f"{sched!r}: {what}; set env.preference only with "
                              "train.schedule = \"fixed\"")
    if sched in LANDMARK_SCHEDULES:
        if len(names) != 3:
            raise ConfigError(f"train.schedule={sched!r} is invalid in {where} with env.reward="
                              f"{cfg.env.get('reward')!r}: MOCC's landmarks are preferences "
                              f"over 3 objectives, the reward has {len(names)}; use "
                              "\"episode\" or \"fixed\"")
        _check_landmarks(cfg, sched, where)
    try:
        check_preference(cfg.env.get("preference", default_preference(len(names))),
                         "env.preference", names)
    except ConfigError as e:
        raise ConfigError(f"{e} (in {where})") from None
    scenario = cfg.env.get("scenario", "mocc-train")
    if scenario not in _SCENARIOS_OK:
        load_scenario(scenario)  # an unknown scenario is a ConfigError here, before tracing
        _SCENARIOS_OK.add(scenario)


def _check_landmarks(cfg: AlgoConfig, sched: str, where: str) -> None:
    """The landmark grid exists and every landmark (or bootstrap vector) gets an
    environment: with fewer environments than landmarks, ``i mod ω`` would leave some landmarks
    untrained yet evaluated."""
    from ccjax.agents.landmarks import BOOTSTRAP, simplex_grid

    t = cfg.train
    step = t.get("landmarks_step", 0.1)
    try:
        omega = len(simplex_grid(step))
    except ConfigError as e:
        raise ConfigError(f"train.{e} (in {where})") from None
    n = t.get("n_envs", 1024)
    if sched == "all-at-once" and n < omega:
        raise ConfigError(f"train.n_envs={n} is invalid in {where}: all-at-once puts "
                          f"environment i on landmark i mod {omega} (landmarks_step={step!r}), "
                          f"so it needs at least {omega} environments")
    if sched == "two-phase" and t.get("bootstrap_iters", 300) > 0 and n < len(BOOTSTRAP):
        raise ConfigError(f"train.n_envs={n} is invalid in {where}: two-phase bootstraps on "
                          f"{len(BOOTSTRAP)} preferences at once, so it needs at least "
                          f"{len(BOOTSTRAP)} environments")


_SCENARIOS_OK: set[str] = set()
