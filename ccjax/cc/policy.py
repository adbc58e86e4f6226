"""A trained policy (MOCC, Aurora or AUTO) as a controller: the learned sender behind the same
interface as Cubic or BBR, so "evaluate Cubic", "evaluate MOCC at w" and "Cubic competing with
MOCC" are one code path (``ccjax.api.run_controller``, ``ccjax.cc.mix.Mix``, ``ccjax.evaluate``).

Per MI the controller does exactly what ``ccjax.envs.single_flow.SingleFlowEnv`` does around a
deterministic agent (the tests check that both give the same rate sequence and MI boundaries):

* features of the MI that just ended (the policy's feature set, ``ccjax.envs.features``:
  MOCC's sending ratio, latency ratio against the running minimum of per-MI mean RTTs and
  latency gradient, MOCC §3.1 and Aurora's defaults; or AUTO's five, Eq. 4, whose last is the
  previous action's feature, kept in ``PolicyState.act_feat``) are pushed into a window of the
  last ``history`` MIs (MOCC Table 2: 10);
* observation = [w, window] when the network takes a preference (``pref_dim`` = the number of
  objectives: MOCC 3, AUTO 2), the window alone for Aurora; the ratios as logs with
  ``log_ratios`` (``features.encode``);
* action = the network's greedy one (``ccjax.agents.export.greedy_action``): the Gaussian
  actor's mean (PPO explores only in training), or the argmax of AUTO's logits;
* rate <- the action map (``ccjax.envs.actions.apply_action``): MOCC Eq. 1
  (rate (1 + alpha a) if a >= 0 else rate / (1 - alpha a), alpha = 0.025), or AUTO Eq. 7's
  multipliers; kept within [min_rate, max_rate];
* the next MI lasts ``mi_rtts`` (0.5) x the mean RTT of the MI that ended, capped at
  ``mi_min_rtts`` x the sender's minimum RTT when that is finite and > 0 (AUTO Eq. 6: 1.5;
  inf for MOCC and Aurora: no cap), the guard of ``AgentSlot.on_interval``; the first MI lasts
  1.5 x the base RTT (Aurora: 3 x the one-way latency, PCC-RL ``network_sim.py``).

As in the environment, the first action is taken at ``init`` on the empty history, and the first
MI (1.5 base RTTs, whose ACKs come back only in its last third) is the first one acted on and
rewarded. Aurora's ``reset`` differs: it runs two MIs at the initial rate and returns an
observation that holds them, so its agent's first action already sees feedback.

One addition, for flows that start late (competition runs): until the flow has sent its first
byte, MIs leave the controller's state alone; without it a flow waiting for its start time would
act on empty feedback and drift its rate before sending anything. The environment's agent flow
starts at t = 0, so the two differ only if it sent nothing at all in its first MI (the packet
model below about one packet per first MI; evaluation starts far above that). Later MIs without
traffic (a low rate in the packet model) are acted on, as in the environment.

The initial rate is a parameter (bytes/s): the controller cannot know the link's capacity, from
which Aurora and MOCC draw it in training (U(0.3, 1.5) x capacity). ``init_rate = 0`` means ten
packets per base RTT, TCP's initial window (RFC 6928) and Vivace's start here;
``ccjax.evaluate`` passes a fraction of each link's capacity instead (see there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
from flax import struct

from ccjax.agents.export import NETWORK_MODULES, greedy_action
from ccjax.agents.networks import GaussianActor
from ccjax.cc.base import Decision
from ccjax.envs.actions import ACTION_MAPS, action_feature, apply_action
from ccjax.envs.features import FEATURE_SETS, encode, state_dim
from ccjax.envs.rewards import OBJECTIVES
from ccjax.errors import ConfigError
from ccjax.units import PACKET_BYTES

if TYPE_CHECKING:
    from ccjax.sim.stats import MIStats

#: initial window (packets) behind ``init_rate = 0``: RFC 6928's IW10
INIT_WINDOW_PKTS = 10.0


def _mocc_actor() -> GaussianActor:
    """PPO-MOCC's actor at its default sizes (``PPO().actor_net``'s module)."""
    return GaussianActor(1, (64, 32), 3, 32)


class PolicyParams(struct.PyTreeNode):
    """Dynamic parameters. ``actor`` has no flow axis: all flows of a link that run the policy
    share its weights; everything else is per flow."""

    actor: Any  # flax variables of the network ({"params": {...}})
    pref: jnp.ndarray  # (F, K) preference, one weight per objective; ignored if pref_dim = 0
    alpha: jnp.ndarray  # (F,) action scale (MOCC Table 2: 0.025)
    mi_rtts: jnp.ndarray  # (F,) MI length in mean RTTs of the previous MI (Aurora: 0.5)
    mi_min_rtts: jnp.ndarray  # (F,) MI cap in minimum RTTs (AUTO Eq. 6: 1.5); inf: none
    min_rate: jnp.ndarray  # (F,) bytes/s
    max_rate: jnp.ndarray  # (F,) bytes/s
    init_rate: jnp.ndarray  # (F,) bytes/s before the first action; 0: 10 packets per base RTT


class PolicyState(struct.PyTreeNode):
    rate: jnp.ndarray  # (F,) bytes/s
    hist: jnp.ndarray  # (F, history, n_features) features of the last MIs, oldest first
    min_lat: jnp.ndarray  # (F,) s, smallest per-MI mean RTT so far (latency ratio's reference)
    action: jnp.ndarray  # (F,) last action (float32 mean, or int32 index)
    act_feat: jnp.ndarray  # (F,) the last action as a feature (envs.actions.action_feature)
    started: jnp.ndarray  # (F,) bool: the flow has sent something


@dataclass(frozen=True)
class PolicyController:
    """Static configuration: the network (``net``, a flax module of kind ``kind``:
    ``ccjax.agents.export.NETWORK_MODULES``), the environment's feature set, action map,
    objectives and history length.

    ``actor`` and the scalar fields below it are only the defaults ``default_params`` fills in
    (so a controller loaded from a model directory works wherever a classic one does, e.g. in a
    ``Mix``); the running values are always those of the ``PolicyParams`` passed in. The weights
    take no part in equality or hashing."""

    net: Any = field(default_factory=_mocc_actor)
    kind: str = "gaussian-mlp"
    history: int = 10
    log_ratios: bool = False  # the observation's ratios as logs (features.encode)
    features: str = "mocc"  # envs.features.FEATURE_SETS
    action_map: str = "mocc"  # envs.actions.ACTION_MAPS
    objectives: tuple[str, ...] = OBJECTIVES["mocc"]
    name: str = "policy"
    actor: Any = field(default=None, compare=False, hash=False, repr=False)
    preference: tuple[float, ...] | None = None
    alpha: float = 0.025
    mi_rtts: float = 0.5
    mi_min_rtts: float = math.inf
    min_rate: float = 10.0 * PACKET_BYTES
    max_rate: float = 1e5 * PACKET_BYTES
    init_rate: float = 0.0

    def __post_init__(self) -> None:
        module = NETWORK_MODULES.get(self.kind)
        if module is None:
            raise ConfigError(f"kind={self.kind!r} is invalid: one of "
                              f"{', '.join(NETWORK_MODULES)}")
        if not isinstance(self.net, module):
            raise ConfigError(f"net={type(self.net).__name__} is invalid: a {module.__name__} "
                              f"for kind={self.kind!r}")
        if self.features not in FEATURE_SETS:
            raise ConfigError(f"features={self.features!r} is invalid: one of "
                              f"{', '.join(FEATURE_SETS)}")
        if self.action_map not in ACTION_MAPS:
            raise ConfigError(f"action_map={self.action_map!r} is invalid: one of "
                              f"{', '.join(ACTION_MAPS)}")
        if self.pref_dim not in (0, len(self.objectives)):
            raise ConfigError(f"pref_dim={self.pref_dim} is invalid: 0 or the number of "
                              f"objectives ({len(self.objectives)})")

    @property
    def pref_dim(self) -> int:
        return int(self.net.pref_dim)

    @property
    def n_features(self) -> int:
        return FEATURE_SETS[self.features].n

    @property
    def obs_dim(self) -> int:
        return state_dim(self.pref_dim, self.history, self.n_features)

    def make_params(self, n_flows: int, actor: Any = None, **overrides: Any) -> PolicyParams:
        """Parameters for ``n_flows`` flows from this controller's defaults; ``actor`` and any
        field of ``PolicyParams`` (scalars, or one value per flow) override them."""
        actor = self.actor if actor is None else actor
        if actor is None:
            raise ConfigError("actor=None is invalid: a policy controller needs trained weights "
                              "(load a model directory with load_policy_controller)")
        K = len(self.objectives)
        pref = overrides.pop("pref", self.preference)
        if pref is None:
            if self.pref_dim:
                names = ",".join(f"w_{n}" for n in self.objectives)
                raise ConfigError("preference=None is invalid: this policy takes a preference "
                                  f"{names} (the model stores none)")
            pref = (0.0,) * K  # Aurora: unused
        vals = {k: overrides.pop(k, getattr(self, k))
                for k in ("alpha", "mi_rtts", "mi_min_rtts", "min_rate", "max_rate",
                          "init_rate")}
        if overrides:
            raise ConfigError(f"{sorted(overrides)} is invalid: PolicyParams fields are pref, "
                              "alpha, mi_rtts, mi_min_rtts, min_rate, max_rate, init_rate")
        f32 = jnp.float32
        per_flow = {k: jnp.broadcast_to(jnp.asarray(v, f32), (n_flows,)) for k, v in vals.items()}
        return PolicyParams(actor=actor,
                            pref=jnp.broadcast_to(jnp.asarray(pref, f32), (n_flows, K)),
                            **per_flow)

    def default_params(self, n_flows: int) -> PolicyParams:
        return self.make_params(n_flows)

    # ---- the policy step, shared by init and on_interval

    def _obs(self, hist: jnp.ndarray, pref: jnp.ndarray) -> jnp.ndarray:
        flat = encode(hist, self.log_ratios).reshape(hist.shape[0], -1)
        if not self.pref_dim:
            return flat
        return jnp.concatenate([jnp.broadcast_to(pref, (hist.shape[0], self.pref_dim)), flat],
                               -1)

    def _act(self, actor: Any, hist: jnp.ndarray, pref: jnp.ndarray) -> jnp.ndarray:
        """(F,) deterministic actions: the Gaussian's mean, or the argmax of the logits."""
        return greedy_action(self.kind, self.net, actor, self._obs(hist, pref))

    def _apply(self, rate: jnp.ndarray, a: jnp.ndarray, p: PolicyParams
               ) -> tuple[jnp.ndarray, jnp.ndarray]:
        """(new rate, the action's feature) under the action map."""
        new = apply_action(self.action_map, rate, a, p.alpha, p.min_rate, p.max_rate, jnp)
        feat = jnp.broadcast_to(action_feature(self.action_map, a, jnp), rate.shape)
        return new, feat.astype(jnp.float32)

    @staticmethod
    def _decide(rate: jnp.ndarray, mi_s: jnp.ndarray) -> Decision:
        # Rate-based: pace at the rate, no window (Aurora, MOCC and AUTO limit nothing in flight).
        return Decision(rate=rate, cwnd=jnp.full_like(rate, jnp.inf), mi_s=mi_s,
                        mi_round=jnp.zeros(rate.shape, bool))

    def init(self, params: PolicyParams, base_rtt_s: jnp.ndarray
             ) -> tuple[PolicyState, Decision]:
        p = params
        rtt = jnp.asarray(base_rtt_s, jnp.float32)
        F = rtt.shape[0]
        iw = INIT_WINDOW_PKTS * PACKET_BYTES / jnp.maximum(rtt, 1e-6)
        rate0 = jnp.clip(jnp.where(p.init_rate > 0, p.init_rate, iw), p.min_rate, p.max_rate)
        empty = FEATURE_SETS[self.features].empty_history(self.history)
        hist = jnp.broadcast_to(empty, (F,) + empty.shape)
        a = self._act(p.actor, hist, p.pref)
        rate, act_feat = self._apply(rate0, a, p)
        state = PolicyState(rate=rate, hist=hist,
                            min_lat=jnp.full(F, jnp.inf, jnp.float32), action=a,
                            act_feat=act_feat, started=jnp.zeros(F, bool))
        # Aurora's first MI: 3 x the one-way latency = 1.5 x the base RTT.
        return state, self._decide(rate, 1.5 * rtt)

    def on_interval(self, state: PolicyState, stats: MIStats, params: PolicyParams
                    ) -> tuple[PolicyState, Decision]:
        p, s = params, state
        feat, min_lat = FEATURE_SETS[self.features].compute(stats, s.min_lat, s.act_feat)
        hist = jnp.concatenate([s.hist[:, 1:], feat[:, None]], 1)
        a = self._act(p.actor, hist, p.pref)
        rate, act_feat = self._apply(s.rate, a, p)
        started = s.started | (stats.sent_bytes > 0)
        new = PolicyState(rate=rate, hist=hist, min_lat=min_lat, action=a, act_feat=act_feat,
                          started=started)
        # Before the flow's first byte (a later start time) an MI changes nothing.
        new = jax.tree.map(
            lambda n, o: jnp.where(started.reshape(started.shape + (1,) * (n.ndim - 1)), n, o),
            new, s.replace(started=started))
        mi = p.mi_rtts * stats.rtt_mean
        # AUTO Eq. 6's cap, as ``AgentSlot.on_interval`` applies it: an infinite cap, or a
        # sender without an RTT sample yet, leaves the MI alone
        cap = p.mi_min_rtts * stats.min_rtt
        mi = jnp.where(jnp.isfinite(cap) & (cap > 0), jnp.minimum(mi, cap), mi)
        return new, self._decide(new.rate, mi)


def load_policy_controller(path: str | Path, preference: Any = None) -> PolicyController:
    """The controller of a saved policy (a directory with ``policy.json`` and ``policy.npz``,
    either format, written by ``ccjax.agents.export.save_policy``), its defaults taken from the
    model's metadata; ``preference`` (one weight per objective of the model) replaces the
    model's own (checked to lie on the simplex). Raises ``ConfigError`` for a directory that is
    not a policy."""
    from ccjax.agents.export import load_policy
    from ccjax.envs.build import check_preference

    module, actor, meta = load_policy(path)  # validates the format, fields and shapes
    names = tuple(meta["objectives"])
    if preference is not None:
        pref = tuple(float(x) for x in check_preference(preference, names=names))
    elif meta["preference"] is not None:
        pref = tuple(float(x) for x in meta["preference"])
    else:
        pref = None
    cap = meta["mi_min_rtts"]
    return PolicyController(net=module, kind=meta["network"]["kind"],
                            history=int(meta["history"]), name=str(meta["algo"]),
                            log_ratios=bool(meta["log_ratios"]), features=meta["features"],
                            action_map=meta["action_map"], objectives=names,
                            actor=actor, preference=pref, alpha=float(meta["alpha"]),
                            mi_rtts=float(meta["mi_rtts"]),
                            mi_min_rtts=math.inf if cap is None else float(cap),
                            min_rate=float(meta["min_rate"]), max_rate=float(meta["max_rate"]))
