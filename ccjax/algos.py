"""Algorithm presets (``algos/*.toml``): an algorithm's hyperparameters, environment and training
schedule, each value with its source in the file.

A preset has four tables, every key checked (an unknown key or a value of the wrong type is a
one-line ``ConfigError`` before anything is traced):

* ``[agent]``  static configuration of the learner: ``kind`` (``ccjax.agents.registry``: ppo,
  envelope) and the keys that kind reads (network sizes, epochs, minibatches, replay);
* ``[hyper]``  dynamic hyperparameters (a sweep vmaps over them);
* ``[env]``    the environment (``ccjax.envs.build.make_single_flow`` arguments);
* ``[train]``  the batch and the schedule (``ccjax.train``).

``load_algo(name_or_path, overrides)`` returns an ``AlgoConfig``; ``overrides`` maps
``"table.key"`` to a value, which is how CLI flags such as ``--landmarks-step`` reach it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccjax.errors import ConfigError

#: ``train.anneal``: the step size and clip range stay constant, or fall linearly to 0 over the
#: run (stable-baselines PPO1's ``schedule``; ``ccjax.agents.ppo.with_anneal``)
ANNEAL_MODES = ("constant", "linear")
#: agent.adv_norm: advantages normalised over the batch (PPO1) or per preference
#: (ccjax.agents.ppo.PPO.normalise)
ADV_NORMS = ("batch", "preference")

_NUM = (int, float)
_SCHEDULES = ("two-phase", "all-at-once", "fixed", "episode")
#: agent kinds (``ccjax.agents.registry.KINDS``; listed here so validating a preset imports
#: no agent module)
AGENT_KINDS = ("ppo", "envelope")
#: the [agent] and [hyper] keys each kind reads (its module's AGENT_KEYS/HYPER_KEYS; a test
#: checks both agree)
KIND_KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "ppo": {"agent": ("hidden", "pn_width", "pref_dim", "n_epochs", "n_minibatches",
                      "max_grad_norm", "adam_eps", "log_std_bounds", "adv_norm",
                      "critic_features"),
            "hyper": ("lr", "clip", "gamma", "lam", "ent_start", "ent_end", "ent_iters",
                      "vf_coef", "reward_scale")},
    "envelope": {"agent": ("hidden", "head_width", "pref_dim", "replay_size", "batch_size",
                           "updates_per_iter", "n_prefs", "n_envelope", "max_grad_norm",
                           "adam_eps", "critic_features"),
                 "hyper": ("lr", "gamma", "ent_coef", "lambda_iters", "vf_coef",
                           "policy_coef", "target_tau")},
}


def _finite_pair(v: list[Any]) -> bool:
    """Two finite numbers: an infinite rate or rate bound would pass ``0 < low <= high`` and
    reach the simulator as a rate it cannot send at."""
    return len(v) == 2 and all(isinstance(x, _NUM) and not isinstance(x, bool)
                               and math.isfinite(x) for x in v)


#: every key a table may hold, with its type and a check (None: any value of the type)
SCHEMA: dict[str, dict[str, tuple[type | tuple[type, ...], Any]]] = {
    "agent": {
        "kind": (str, lambda v: v in AGENT_KINDS),
        "hidden": (list, lambda v: len(v) >= 1 and all(isinstance(x, int) and x > 0 for x in v)),
        "pn_width": (int, lambda v: v > 0),
        "pref_dim": (int, lambda v: v in (0, 2, 3)),
        "n_epochs": (int, lambda v: v >= 1),
        "n_minibatches": (int, lambda v: v >= 1),
        "max_grad_norm": (_NUM, lambda v: v > 0),
        "adam_eps": (_NUM, lambda v: v > 0),
        "log_std_bounds": (list, lambda v: len(v) == 2
                           and all(isinstance(x, _NUM) and not isinstance(x, bool)
                                   and math.isfinite(x) for x in v) and v[0] < v[1]),
        "adv_norm": (str, lambda v: v in ADV_NORMS),
        "critic_features": (bool, None),
        "head_width": (int, lambda v: v > 0),
        "replay_size": (int, lambda v: v >= 1),
        "batch_size": (int, lambda v: v >= 1),
        "updates_per_iter": (int, lambda v: v >= 1),
        "n_prefs": (int, lambda v: v >= 1),
        "n_envelope": (int, lambda v: v >= 1),
    },
    "hyper": {
        "lr": (_NUM, lambda v: v > 0),
        "clip": (_NUM, lambda v: 0 < v < 1),
        "gamma": (_NUM, lambda v: 0 < v <= 1),
        "lam": (_NUM, lambda v: 0 <= v <= 1),
        "ent_start": (_NUM, lambda v: v >= 0),
        "ent_end": (_NUM, lambda v: v >= 0),
        "ent_iters": (_NUM, lambda v: v >= 1),
        "vf_coef": (_NUM, lambda v: v >= 0),
        "reward_scale": (_NUM, lambda v: v > 0),
        "ent_coef": (_NUM, lambda v: v >= 0),
        "lambda_iters": (_NUM, lambda v: v >= 1),
        "policy_coef": (_NUM, lambda v: v >= 0),
        "target_tau": (_NUM, lambda v: 0 < v <= 1),
    },
    "env": {
        "scenario": (str, None),
        "pool": (int, lambda v: v >= 1),
        "model": (str, lambda v: v in ("fluid", "packet")),
        "tick_ms": (_NUM, lambda v: 0 < v <= 100),
        "history": (int, lambda v: v >= 1),
        "episode_len": (int, lambda v: v >= 1),
        "alpha": (_NUM, lambda v: v > 0),
        "mi_rtts": (_NUM, lambda v: v > 0),
        "init_rate": (list, lambda v: _finite_pair(v) and 0 < v[0] <= v[1]),
        "rate_bounds_pkts": (list, lambda v: _finite_pair(v) and 0 < v[0] < v[1]),
        "reward": (str, None),
        "preference": (list, lambda v: len(v) in (2, 3)),
        "log_ratios": (bool, None),
        "features": (str, lambda v: v in ("mocc", "auto")),
        "action_map": (str, lambda v: v in ("mocc", "auto")),
        "mi_min_rtts": (_NUM, lambda v: v > 0),
    },
    "train": {
        "n_envs": (int, lambda v: v >= 2),
        "n_steps": (int, lambda v: v >= 1),
        "tick_budget": (int, lambda v: v >= 0),
        "chunk": (int, lambda v: v >= 1),
        "schedule": (str, lambda v: v in _SCHEDULES),
        "landmarks_step": (_NUM, lambda v: 0 < v <= 1 / 3 + 1e-9),
        "bootstrap_iters": (int, lambda v: v >= 0),
        "visit_iters": (int, lambda v: v >= 1),
        "max_cycles": (int, lambda v: v >= 1),
        "min_cycles": (int, lambda v: v >= 1),
        "converge_tol": (_NUM, lambda v: v >= 0),
        "patience": (int, lambda v: v >= 1),
        "iters": (int, lambda v: v >= 1),
        "adapt_iters": (int, lambda v: v >= 1),
        "eval_every": (int, lambda v: v >= 1),
        "eval_links": (int, lambda v: v >= 1),
        "eval_steps": (int, lambda v: v >= 1),
        "checkpoint_every": (int, lambda v: v >= 1),
        "shard": (bool, None),
        "anneal": (str, lambda v: v in ANNEAL_MODES),
    },
}

#: what each key allows, as its error states it (every key of ``SCHEMA``: a test checks that none
#: is missing, so no error says only "in the allowed range")
_ALLOWED = {
    # agent
    "kind": ", ".join(AGENT_KINDS),
    "hidden": "a list of positive integers",
    "pn_width": "an integer > 0",
    "pref_dim": "0, or the reward's number of objectives (3 for MOCC, 2 for AUTO)",
    "n_epochs": "an integer >= 1",
    "n_minibatches": "an integer >= 1",
    "max_grad_norm": "a finite number > 0",
    "adam_eps": "a finite number > 0",
    "log_std_bounds": "[low, high] with low < high (natural log of the std)",
    "adv_norm": ", ".join(ADV_NORMS),
    "critic_features": "true or false",
    "head_width": "an integer > 0",
    "replay_size": "an integer >= 1",
    "batch_size": "an integer >= 1",
    "updates_per_iter": "an integer >= 1",
    "n_prefs": "an integer >= 1",
    "n_envelope": "an integer >= 1",
    # hyper
    "lr": "a finite number > 0",
    "clip": "a number in (0, 1)",
    "gamma": "a number in (0, 1]",
    "lam": "a number in [0, 1]",
    "ent_start": "a finite number >= 0",
    "ent_end": "a finite number >= 0",
    "ent_iters": "a finite number >= 1",
    "vf_coef": "a finite number >= 0",
    "reward_scale": "a finite number > 0",
    "ent_coef": "a finite number >= 0",
    "lambda_iters": "a finite number >= 1",
    "policy_coef": "a finite number >= 0",
    "target_tau": "a number in (0, 1] (1: no target network)",
    # env
    "scenario": "a scenario preset name or a TOML path",
    "pool": "an integer >= 1",
    "model": "fluid or packet",
    "tick_ms": "a number in (0, 100] ms",
    "history": "an integer >= 1",
    "episode_len": "an integer >= 1",
    "alpha": "a finite number > 0",
    "mi_rtts": "a finite number > 0",
    "init_rate": "[low, high] of finite numbers with 0 < low <= high",
    "rate_bounds_pkts": "[min, max] of finite numbers with 0 < min < max",
    "reward": "a reward's name (a string: mocc, aurora or auto)",
    "preference": "one weight per objective (three for MOCC, two for AUTO)",
    "log_ratios": "true or false",
    "features": "mocc or auto",
    "action_map": "mocc or auto",
    "mi_min_rtts": "a finite number > 0 (MI cap in minimum RTTs; AUTO Eq. 6: 1.5)",
    # train
    "n_envs": "an integer >= 2",
    "n_steps": "an integer >= 1",
    "tick_budget": "an integer >= 0",
    "chunk": "an integer >= 1",
    "schedule": ", ".join(_SCHEDULES),
    "landmarks_step": "a grid step in (0, 1/3]",
    "bootstrap_iters": "an integer >= 0",
    "visit_iters": "an integer >= 1",
    "max_cycles": "an integer >= 1",
    "min_cycles": "an integer >= 1",
    "converge_tol": "a finite number >= 0",
    "patience": "an integer >= 1",
    "iters": "an integer >= 1",
    "adapt_iters": "an integer >= 1",
    "eval_every": "an integer >= 1",
    "eval_links": "an integer >= 1",
    "eval_steps": "an integer >= 1",
    "checkpoint_every": "an integer >= 1",
    "shard": "true or false",
    "anneal": ", ".join(ANNEAL_MODES),
}


def presets_dir() -> Path:
    """Where the named algorithm presets live (``ccjax.presets``)."""
    from ccjax.presets import presets_dir as where

    return where("algos")


def list_algos() -> list[str]:
    d = presets_dir()
    return sorted(p.stem for p in d.glob("*.toml")) if d.is_dir() else []


@dataclass(frozen=True)
class AlgoConfig:
    """A loaded, validated preset (plus overrides)."""

    name: str
    agent: dict[str, Any]
    hyper: dict[str, float]
    env: dict[str, Any]
    train: dict[str, Any]
    description: str = ""
    source: str = ""
    path: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "agent": self.agent, "hyper": self.hyper, "env": self.env,
                "train": self.train, "source": self.source, "path": self.path,
                "overrides": self.overrides}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AlgoConfig:
        tables = {t: dict(d.get(t, {})) for t in SCHEMA}
        for t, kv in tables.items():
            _check_table(t, kv, d.get("path", "config"))
        return cls(name=d["name"], agent=tables["agent"], hyper=tables["hyper"],
                   env=tables["env"], train=tables["train"], source=d.get("source", ""),
                   path=d.get("path", ""), overrides=dict(d.get("overrides", {})))


def check_value(table: str, key: str, value: Any, where: str) -> Any:
    """``value`` of ``table.key`` checked against ``SCHEMA`` (type and range) and returned;
    a ``ConfigError`` naming ``where`` and what is allowed otherwise."""
    spec = SCHEMA[table].get(key)
    if spec is None:
        raise ConfigError(f"{table}.{key} is invalid in {where}: unknown key; allowed: "
                          f"{', '.join(SCHEMA[table])}")
    typ, check = spec
    if typ is _NUM and isinstance(value, bool):
        ok = False
    elif typ is _NUM:
        ok = isinstance(value, _NUM) and math.isfinite(value)
    elif typ is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, typ)
    if ok and check is not None:
        try:
            ok = bool(check(value))
        except TypeError:
            ok = False
    if not ok:
        allowed = _ALLOWED[key]
        raise ConfigError(f"{table}.{key}={value!r} is invalid in {where}: {allowed}")
    return value


def check_minibatches(agent: dict[str, Any], train: dict[str, Any]) -> None:
    """Every minibatch holds at least one sample. An update splits the iteration's
    n_envs x n_steps samples, shuffled each epoch, into n_minibatches minibatches of
    (n_envs x n_steps) // n_minibatches samples (``ccjax.agents.ppo.PPO.update``): more
    minibatches than samples would make them empty, and the run would "finish" without a
    single update."""
    m = agent.get("n_minibatches", 8)
    n, steps = train.get("n_envs", 1024), train.get("n_steps", 32)
    if m > n * steps:
        raise ConfigError(f"agent.n_minibatches={m} is invalid with train.n_envs={n} x "
                          f"train.n_steps={steps} = {n * steps} samples per iteration: at most "
                          f"{n * steps} (an update splits the samples into n_minibatches "
                          "minibatches of n_envs x n_steps // n_minibatches samples each)")


def _check_table(table: str, kv: dict[str, Any], where: str) -> None:
    for k, v in kv.items():
        check_value(table, k, v, where)


def agent_kind(agent: dict[str, Any]) -> str:
    return str(agent.get("kind", AGENT_KINDS[0]))


def check_kind_keys(agent: dict[str, Any], hyper: dict[str, Any], where: str) -> None:
    """Every [agent] and [hyper] key is one the agent's kind reads (``KIND_KEYS``): a key of
    another algorithm would be recorded as if it had shaped the run."""
    kind = agent_kind(agent)
    for table, kv in (("agent", agent), ("hyper", hyper)):
        allowed = KIND_KEYS[kind][table]
        for k in kv:
            if k != "kind" and k not in allowed:
                raise ConfigError(f"{table}.{k} is invalid in {where} for agent.kind={kind!r}:"
                                  f" that kind reads {', '.join(allowed)}")


def load_algo(name_or_path: str | os.PathLike[str],
              overrides: dict[str, Any] | None = None) -> AlgoConfig:
    """Load a preset by name (``"ppo-mocc"``) or a TOML file by path, then apply
    ``overrides`` (``{"train.landmarks_step": 0.2}``)."""
    s = os.fspath(name_or_path)
    if s.endswith(".toml") or "/" in s or os.sep in s:
        path = Path(s)
    else:
        path = presets_dir() / f"{s}.toml"
        if not path.is_file():
            raise ConfigError(f"algo={s!r} is invalid: no such preset; available: "
                              f"{', '.join(list_algos()) or '(none)'} (or a path to a .toml)")
    if not path.is_file():
        raise ConfigError(f"algo={s!r} is invalid: file not found")
    from ccjax.presets import read_toml

    data = read_toml(path, s)
    where = path.name
    extra = set(data) - set(SCHEMA) - {"name", "description", "source"}
    if extra:
        raise ConfigError(f"{where} is invalid: unknown table or key {sorted(extra)[0]!r}; "
                          f"allowed: name, description, source, {', '.join(SCHEMA)}")
    for t in SCHEMA:  # before dict() reads a value that is no table
        if not isinstance(data.get(t, {}), dict):
            raise ConfigError(f"{where} is invalid: [{t}] must be a table")
    for k in ("name", "description", "source"):
        if not isinstance(data.get(k, ""), str):
            raise ConfigError(f"{k}={data[k]!r} is invalid in {where}: a string")
    tables = {t: dict(data.get(t, {})) for t in SCHEMA}
    for t, kv in tables.items():
        _check_table(t, kv, where)
    overrides = dict(overrides or {})
    for dotted, v in overrides.items():
        t, _, k = dotted.partition(".")
        if t not in SCHEMA or not k:
            raise ConfigError(f"override {dotted!r} is invalid: use table.key with table one of "
                              f"{', '.join(SCHEMA)}")
        tables[t][k] = check_value(t, k, v, "overrides")
    check_kind_keys(tables["agent"], tables["hyper"], where)
    if agent_kind(tables["agent"]) == "ppo":
        check_minibatches(tables["agent"], tables["train"])
    return AlgoConfig(name=str(data.get("name", path.stem)), agent=tables["agent"],
                      hyper=tables["hyper"], env=tables["env"], train=tables["train"],
                      description=str(data.get("description", "")),
                      source=str(data.get("source", "")), path=str(path), overrides=overrides)
