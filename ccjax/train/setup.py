"""Build the environment, the learner and the landmark evaluator from an ``AlgoConfig``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ccjax.agents.drivers import init_runner, rollout
from ccjax.agents.registry import kind_module
from ccjax.algos import AlgoConfig, agent_kind
from ccjax.envs.build import make_single_flow
from ccjax.envs.single_flow import EnvParams, SingleFlowEnv
from ccjax.envs.vec import VecEnv

#: the training pool and the evaluation links are drawn from the scenario with different seeds
EVAL_SEED_OFFSET = 10_007


def env_kwargs(cfg: AlgoConfig) -> dict[str, Any]:
    e = cfg.env
    kw: dict[str, Any] = dict(
        model=e.get("model", "fluid"), tick_s=float(e.get("tick_ms", 1.0)) / 1000.0,
        history=e.get("history", 10), episode_len=e.get("episode_len", 400),
        reward=e.get("reward", "mocc"), use_pref=cfg.agent.get("pref_dim", 3) > 0,
        alpha=float(e.get("alpha", 0.025)),
        init_rate=tuple(float(x) for x in e.get("init_rate", (0.3, 1.5))),
        rate_bounds_pkts=tuple(float(x) for x in e.get("rate_bounds_pkts", (10.0, 1e5))),
        mi_rtts=float(e.get("mi_rtts", 0.5)), log_ratios=bool(e.get("log_ratios", False)),
        critic_features=bool(cfg.agent.get("critic_features", False)),
        features=e.get("features", "mocc"), action_map=e.get("action_map", "mocc"),
        mi_min_rtts=float(e.get("mi_min_rtts", float("inf"))))
    if "preference" in e:
        kw["preference"] = tuple(float(x) for x in e["preference"])
    return kw


def make_agent(cfg: AlgoConfig) -> tuple[Any, Any]:
    """(agent, hyperparameters) of the preset's ``agent.kind`` (``ccjax.agents.registry``)."""
    return kind_module(agent_kind(cfg.agent)).build(cfg)


@dataclass
class Setup:
    cfg: AlgoConfig
    env: SingleFlowEnv
    params: EnvParams
    venv: VecEnv
    agent: Any  # an ``ccjax.agents.base.Agent`` of the registry
    hyper: Any
    seed: int


def build(cfg: AlgoConfig, seed: int = 0) -> Setup:
    t = cfg.train
    env, params = make_single_flow(cfg.env.get("scenario", "mocc-train"),
                                   pool=cfg.env.get("pool", 256), seed=seed, **env_kwargs(cfg))
    venv = VecEnv(env, t.get("n_envs", 1024), t.get("tick_budget", 25))
    agent, hyper = make_agent(cfg)
    return Setup(cfg=cfg, env=env, params=params, venv=venv, agent=agent, hyper=hyper,
                 seed=seed)


class Evaluator:
    """Deterministic policy (the Gaussian's mean) on a fixed set of links, every preference of
    a set on every link: per preference the mean reward, utilization, latency ratio and loss
    over the MIs of ``steps`` batch steps. The links and initial rates are the same at every
    call, so successive evaluations differ only through the policy."""

    def __init__(self, setup: Setup, n_prefs: int, n_links: int, steps: int):
        cfg = setup.cfg
        env, params = make_single_flow(cfg.env.get("scenario", "mocc-train"), pool=n_links,
                                       seed=setup.seed + EVAL_SEED_OFFSET,
                                       **env_kwargs(cfg))
        self.n_prefs, self.n_links = n_prefs, n_links
        n = n_prefs * n_links
        venv = VecEnv(env, n, setup.venv.tick_budget)
        agent = setup.agent
        link_index = jnp.tile(jnp.arange(n_links, dtype=jnp.int32), n_prefs)

        def run(agent_state, prefs: jnp.ndarray, key: jnp.ndarray):
            p = params.replace(pref=jnp.repeat(prefs, n_links, 0), link_index=link_index)
            runner = init_runner(venv, agent, agent_state, p, key)
            _, tr = rollout(venv, agent, agent_state, runner, p, steps, explore=False)
            w = tr.valid.astype(jnp.float32)
            cnt = jnp.maximum(w.sum(0), 1.0)
            m = lambda x: ((x * w).sum(0) / cnt).reshape(n_prefs, n_links).mean(1)  # noqa: E731
            return dict(reward=m(tr.reward), utilization=m(jnp.minimum(tr.info.utilization, 1)),
                        latency_ratio=m(tr.info.latency_ratio), loss_rate=m(tr.info.loss_rate))

        self._run = jax.jit(run)
        self._key = jax.random.PRNGKey(setup.seed + EVAL_SEED_OFFSET)

    def __call__(self, agent_state, prefs: np.ndarray) -> dict[str, np.ndarray]:
        out = self._run(agent_state, jnp.asarray(prefs, jnp.float32), self._key)
        return {k: np.asarray(v) for k, v in out.items()}
