"""The agent registry: ``[agent] kind = ...`` in an algorithm preset names one of these.

A kind is a module holding one algorithm (DESIGN: one algorithm per file) that provides:

* ``AGENT_KEYS`` and ``HYPER_KEYS``: the ``[agent]`` and ``[hyper]`` keys it reads (their types,
  checks and error texts are ``ccjax.algos.SCHEMA``'s, so every key is validated the same way
  before anything is traced, and a key another kind reads is refused here by name);
* ``build(cfg) -> (agent, hyper)``: the typed static configuration (a frozen dataclass whose
  defaults are the values a preset may leave out) and the dynamic hyperparameters;
* the agent itself implements ``ccjax.agents.base.Agent`` plus ``actor_params(state)`` (what
  export writes), ``plan_run(state, train, start, n_iters)`` (per-run schedules such as PPO's
  annealing) and ``metric_names`` (the columns of metrics.csv).

A new algorithm is its file, its preset and one line below.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ccjax.errors import ConfigError

#: kind -> the module that implements it
KINDS: dict[str, str] = {
    "ppo": "ccjax.agents.ppo",  # PPO-MOCC and Aurora (MOCC §3.2)
    "envelope": "ccjax.agents.envelope",  # AUTO's envelope multi-objective actor-critic
}
DEFAULT_KIND = "ppo"


def kind_module(kind: str) -> ModuleType:
    """The module of agent ``kind``; a one-line ``ConfigError`` for an unknown one."""
    if kind not in KINDS:
        raise ConfigError(f"agent.kind={kind!r} is invalid: one of {', '.join(KINDS)}")
    return importlib.import_module(KINDS[kind])
