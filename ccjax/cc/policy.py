"""A trained policy (MOCC or Aurora) as a controller: the learned sender behind the same interface
as Cubic or BBR, so "evaluate Cubic", "evaluate MOCC at w" and "Cubic competing with MOCC" are
one code path (``ccjax.api.run_controller``, ``ccjax.cc.mix.Mix``, ``ccjax.evaluate``).

Per MI the controller does exactly what ``ccjax.envs.single_flow.SingleFlowEnv`` does around a
deterministic agent (the tests check that both give the same rate sequence):

* features of the MI that just ended (``ccjax.envs.features.mi_features``: sending ratio,
  latency ratio against the running minimum of per-MI mean RTTs, latency gradient; MOCC §3.1,
  Aurora's defaults) are pushed into a window of the last ``history`` MIs (MOCC Table 2: 10);
* observation = [w, window] for MOCC (``pref_dim = 3``), the window alone for Aurora;
* action a = the actor's mean (the deterministic policy; PPO explores only in training);
* rate <- rate (1 + alpha a) if a >= 0 else rate / (1 - alpha a) (MOCC Eq. 1, alpha = 0.025),
  kept within [min_rate, max_rate];
* the next MI lasts ``mi_rtts`` (0.5) x the mean RTT of the MI that ended; the first one
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

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
from flax import struct

from ccjax.agents.ppo import PPO
from ccjax.cc.base import Decision
from ccjax.envs.features import N_FEATURES, empty_history, encode, mi_features, state_dim
from ccjax.errors import ConfigError
from ccjax.units import PACKET_BYTES

if TYPE_CHECKING:
    from ccjax.sim.stats import MIStats

#: initial window (packets) behind ``init_rate = 0``: RFC 6928's IW10
INIT_WINDOW_PKTS = 10.0


class PolicyParams(struct.PyTreeNode):
    """Dynamic parameters. ``actor`` has no flow axis: all flows of a link that run the policy
    share its weights; everything else is per flow."""

    actor: Any  # flax variables of ``PPO.actor_net`` ({"params": {...}})
    pref: jnp.ndarray  # (F, 3) preference w = (w_thr, w_lat, w_loss); ignored if pref_dim = 0
    alpha: jnp.ndarray  # (F,) action scale (MOCC Table 2: 0.025)
    mi_rtts: jnp.ndarray  # (F,) MI length in mean RTTs of the previous MI (Aurora: 0.5)
    min_rate: jnp.ndarray  # (F,) bytes/s
    max_rate: jnp.ndarray  # (F,) bytes/s
    init_rate: jnp.ndarray  # (F,) bytes/s before the first action; 0: 10 packets per base RTT


class PolicyState(struct.PyTreeNode):
    rate: jnp.ndarray  # (F,) bytes/s
    hist: jnp.ndarray  # (F, history, 3) features of the last MIs, oldest first
    min_lat: jnp.ndarray  # (F,) s, smallest per-MI mean RTT so far (latency ratio's reference)
    action: jnp.ndarray  # (F,) last action (for inspection)
    started: jnp.ndarray  # (F,) bool: the flow has sent something


@dataclass(frozen=True)
class PolicyController:
    """Static configuration: the network shapes (``ppo``) and the history length.

    ``actor`` and the scalar fields below it are only the defaults ``default_params`` fills in
    (so a controller loaded from a model directory works wherever a classic one does, e.g. in a
    ``Mix``); the running values are always those of the ``PolicyParams`` passed in. The weights
    take no part in equality or hashing."""

    ppo: PPO = field(default_factory=PPO)
    history: int = 10
    log_ratios: bool = False  # the observation's ratios as logs (features.encode)
    name: str = "policy"
    actor: Any = field(default=None, compare=False, hash=False, repr=False)
    preference: tuple[float, ...] | None = None
    alpha: float = 0.025
    mi_rtts: float = 0.5
    min_rate: float = 10.0 * PACKET_BYTES
    max_rate: float = 1e5 * PACKET_BYTES
    init_rate: float = 0.0

    @property
    def pref_dim(self) -> int:
        return int(self.ppo.pref_dim)

    @property
    def obs_dim(self) -> int:
        return state_dim(self.pref_dim, self.history)

    def make_params(self, n_flows: int, actor: Any = None, **overrides: Any) -> PolicyParams:
        """Parameters for ``n_flows`` flows from this controller's defaults; ``actor`` and any
        field of ``PolicyParams`` (scalars, or one value per flow) override them."""
        actor = self.actor if actor is None else actor
        if actor is None:
            raise ConfigError("actor=None is invalid: a policy controller needs trained weights "
                              "(load a model directory with load_policy_controller)")
        pref = overrides.pop("pref", self.preference)
        if pref is None:
            if self.pref_dim:
                raise ConfigError("preference=None is invalid: this policy takes a preference "
                                  "w_thr,w_lat,w_loss (the model stores none)")
            pref = (0.0, 0.0, 0.0)  # Aurora: unused
        vals = {k: overrides.pop(k, getattr(self, k))
                for k in ("alpha", "mi_rtts", "min_rate", "max_rate", "init_rate")}
        if overrides:
            raise ConfigError(f"{sorted(overrides)} is invalid: PolicyParams fields are pref, "
                              "alpha, mi_rtts, min_rate, max_rate, init_rate")
        f32 = jnp.float32
        per_flow = {k: jnp.broadcast_to(jnp.asarray(v, f32), (n_flows,)) for k, v in vals.items()}
        return PolicyParams(actor=actor,
                            pref=jnp.broadcast_to(jnp.asarray(pref, f32), (n_flows, 3)),
                            **per_flow)

    def default_params(self, n_flows: int) -> PolicyParams:
        return self.make_params(n_flows)

    # ---- the policy step, shared by init and on_interval

    def _obs(self, hist: jnp.ndarray, pref: jnp.ndarray) -> jnp.ndarray:
        flat = encode(hist, self.log_ratios).reshape(hist.shape[0], -1)
        if not self.pref_dim:
            return flat
        return jnp.concatenate([jnp.broadcast_to(pref, (hist.shape[0], 3)), flat], -1)

    def _act(self, actor: Any, hist: jnp.ndarray, pref: jnp.ndarray) -> jnp.ndarray:
        """(F,) deterministic actions: the mean of the Gaussian policy."""
        mean, _ = self.ppo.actor_net.apply(actor, self._obs(hist, pref))
        return mean[:, 0]

    @staticmethod
    def _apply(rate: jnp.ndarray, a: jnp.ndarray, p: PolicyParams) -> jnp.ndarray:
        # MOCC Eq. 1: multiplicative and asymmetric, so +a and -a cancel exactly.
        new = jnp.where(a >= 0, rate * (1.0 + p.alpha * a), rate / (1.0 - p.alpha * a))
        return jnp.clip(new, p.min_rate, p.max_rate)

    @staticmethod
    def _decide(rate: jnp.ndarray, mi_s: jnp.ndarray) -> Decision:
        # Rate-based: pace at the rate, no window (Aurora and MOCC limit nothing in flight).
        return Decision(rate=rate, cwnd=jnp.full_like(rate, jnp.inf), mi_s=mi_s,
                        mi_round=jnp.zeros(rate.shape, bool))

    def init(self, params: PolicyParams, base_rtt_s: jnp.ndarray
             ) -> tuple[PolicyState, Decision]:
        p = params
        rtt = jnp.asarray(base_rtt_s, jnp.float32)
        F = rtt.shape[0]
        iw = INIT_WINDOW_PKTS * PACKET_BYTES / jnp.maximum(rtt, 1e-6)
        rate0 = jnp.clip(jnp.where(p.init_rate > 0, p.init_rate, iw), p.min_rate, p.max_rate)
        hist = jnp.broadcast_to(empty_history(self.history), (F, self.history, N_FEATURES))
        a = self._act(p.actor, hist, p.pref)
        rate = self._apply(rate0, a, p)
        state = PolicyState(rate=rate, hist=hist,
                            min_lat=jnp.full(F, jnp.inf, jnp.float32), action=a,
                            started=jnp.zeros(F, bool))
        # Aurora's first MI: 3 x the one-way latency = 1.5 x the base RTT.
        return state, self._decide(rate, 1.5 * rtt)

    def on_interval(self, state: PolicyState, stats: MIStats, params: PolicyParams
                    ) -> tuple[PolicyState, Decision]:
        p, s = params, state
        feat, min_lat = mi_features(stats, s.min_lat)
        hist = jnp.concatenate([s.hist[:, 1:], feat[:, None]], 1)
        a = self._act(p.actor, hist, p.pref)
        rate = self._apply(s.rate, a, p)
        started = s.started | (stats.sent_bytes > 0)
        new = PolicyState(rate=rate, hist=hist, min_lat=min_lat, action=a, started=started)
        # Before the flow's first byte (a later start time) an MI changes nothing.
        new = jax.tree.map(
            lambda n, o: jnp.where(started.reshape(started.shape + (1,) * (n.ndim - 1)), n, o),
            new, s.replace(started=started))
        return new, self._decide(new.rate, p.mi_rtts * stats.rtt_mean)


def load_policy_controller(path: str | Path, preference: Any = None) -> PolicyController:
    """The controller of a saved policy (a directory with ``policy.json`` and ``policy.npz``,
    written by ``ccjax.agents.export.save_policy``), its defaults taken from the model's
    metadata; ``preference`` replaces the model's own (checked to lie on the simplex). Raises
    ``ConfigError`` for a directory that is not a policy."""
    from ccjax.agents.export import load_policy
    from ccjax.envs.build import check_preference

    ppo, actor, meta = load_policy(path)  # validates the format, fields and shapes
    if preference is not None:
        pref = tuple(float(x) for x in check_preference(preference))
    elif meta["preference"] is not None:
        pref = tuple(float(x) for x in meta["preference"])
    else:
        pref = None
    return PolicyController(ppo=ppo, history=int(meta["history"]), name=str(meta["algo"]),
                            log_ratios=bool(meta["log_ratios"]),
                            actor=actor, preference=pref, alpha=float(meta["alpha"]),
                            mi_rtts=float(meta["mi_rtts"]), min_rate=float(meta["min_rate"]),
                            max_rate=float(meta["max_rate"]))
