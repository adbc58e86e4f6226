"""Astraea's multi-flow environment: every active flow of a link is an agent.

A link carries up to ``F = SimConfig.n_flows`` flows (the simulator's static flow axis, with its
``present`` mask and per-flow start and stop ticks). The flows ``params.agent`` marks are
driven by a shared policy; the others run a classic controller (``cross``: CUBIC, a ``Mix`` of
several, ...), so friendliness runs share the link with them. Everything per agent carries the
flow axis, not a dict of names: observations (F, obs_dim), actions (F, 1), rewards (F,),
``valid``, ``terminated``, the critic input (F, critic_dim).

Per-flow clocks (Astraea §3.1: "the flow, not the agent, triggers each step", one step per
30 ms monitoring time period, MTP, Table 4). Each agent flow's MTP is its own simulator MI
(``Senders`` sets ``mi_s`` = MTP for it), so the flows' MTPs end at their own ticks, phased by
their arrival times. One environment step runs the link tick by tick until the first *event*:

* an agent flow's MTP ends (``SimState.mi_done``) in a tick it was alive: the flow *decides*.
  Its observation, reward, global state and ``valid`` are those of exactly its own MTP, from
  the tick its last action took effect to this one; every other flow is mid-MTP (``mid``):
  its outputs repeat what it last had, ``valid`` is false and its next action is ignored (the
  drivers hold the action in effect, ``agents.drivers.hold_during_mi``), so the step where its
  own MTP ends carries (its observation, its action, its reward) as one true transition;
* an agent flow arrives: its first MTP starts at the initial window, without an action
  (Astraea §3.1: a flow requests an action "after one MTP of packet statistics"), and the
  environment restarts the flow's simulator MI at the arrival tick, so that MTP too is
  exactly one MTP long. A flow decides for the first time at its first MTP's end; that step is
  not ``valid`` (no action made the MTP);
* the episode ends (``params.end_tick``, the link schedule's duration), or ``max_step_ticks``
  pass without an event (a link with no agent flow alive for that long).

A departed flow (past its stop tick) and one not yet arrived never decide: masked from acting
(``mid``), learning (``valid`` false) and the reward and global state (``LinkView.alive``). An
MTP cut by the flow's departure or the episode's end is no transition (``valid`` false).
Episodes end only at their time limit: ``done`` is true for every flow of the link there, and
``terminated`` is always false (a truncation; learners bootstrap from ``next_obs``).

This is the ``TickEnv`` protocol of ``ccjax.envs.vec`` (``begin``, ``mi_running``,
``sim_tick``, ``end``), so ``VecEnv`` batches links with its per-link tick loop and tick
budget; a cut step (budget spent before the link's event) returns ``valid`` false everywhere.

What the agent sees and learns from is pluggable (``MultiFlowFns``): a flow's own MTP
(``FlowMI``) becomes its per-step features (the actor's observation is the last ``history``
steps, oldest first); the link over the deciding flow's MTP (``LinkView``: every flow's
throughput, latency, loss, window and pacing over that interval, measured from the
simulator's cumulative counters) becomes the critic-only global state and the reward.
``ASTRAEA`` is the default: §3.3's 8 local features x 5 steps, Table 2's 12 global values and
Eqs. 4-8's reward with Table 4's weights. The action is Astraea's Eq. 3 on the window
(``envs.actions.astraea_cwnd``), paced at cwnd / sRTT (§3.3).

Choices where the paper is silent are commented next to their values (search "silent").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from ccjax.cc.base import Controller, Decision
from ccjax.envs.actions import WINDOW_ACTION_MAPS, apply_window_action
from ccjax.envs.spec import ActionSpace, EnvSpec
from ccjax.sim import capacity
from ccjax.sim.core import SimState, data_rtt_floor_s, init_state, tick
from ccjax.sim.link import LinkParams, SimConfig
from ccjax.sim.stats import MIAccum, MIStats
from ccjax.units import PACKET_BYTES

# ---------------------------------------------------------------------------------------------
# What observation, global-state and reward functions see


class FlowMI(struct.PyTreeNode):
    """Each flow's own last MTP (leaves (F,)): what a decentralised actor may observe."""

    stats: MIStats  # the simulator's statistics of the flow's MI (its MTP for agent flows)
    cwnd: jnp.ndarray  # bytes: the window the flow was held to
    pacing: jnp.ndarray  # bytes/s: its pacing rate now (cwnd / sRTT for an Astraea flow)


class LinkView(struct.PyTreeNode):
    """The link over one deciding flow's MTP (what a centralised critic and the reward see).
    Per-flow leaves are (F,), over every flow slot of the link; ``alive`` masks the flows that
    were sending at the MTP's end (the deciding flow always is)."""

    duration_s: jnp.ndarray  # () the deciding flow's MTP
    alive: jnp.ndarray  # (F,) bool: the flow was active in the MTP's last tick
    own: jnp.ndarray  # (F,) bool: the deciding flow
    throughput: jnp.ndarray  # (F,) bytes/s acknowledged during the MTP
    lost_rate: jnp.ndarray  # (F,) bytes/s reported lost during the MTP
    loss_ratio: jnp.ndarray  # (F,) lost / (acked + lost) during the MTP; 0 without reports
    rtt_mean: jnp.ndarray  # (F,) s, mean RTT of the MTP's ACKs (the sender's sRTT if none)
    base_rtt: jnp.ndarray  # (F,) s, the least RTT a data packet sees (propagation + transmission)
    cwnd: jnp.ndarray  # (F,) bytes: the window at the MTP's end (bytes in flight without one)
    pacing: jnp.ndarray  # (F,) bytes/s: the pacing rate at the MTP's end
    capacity: jnp.ndarray  # () bytes/s the link offered during the MTP (mean)
    buffer_bytes: jnp.ndarray  # () the drop-tail buffer
    #: (W, F) each flow's throughput over the deciding flow's last W MTPs, oldest first (this
    #: MTP last): the windows of Astraea Eqs. 6-7
    thr_hist: jnp.ndarray
    hist_alive: jnp.ndarray  # (W, F) bool: the flow was alive at that MTP's end


@dataclass(frozen=True)
class MultiFlowFns:
    """An algorithm's observation, critic input and reward over the multi-flow environment.

    * ``local(mi, carry) -> (features (F, n_features), carry)``: every flow's per-step
      features from its own MTP (``FlowMI``) and a per-flow running carry (``init_carry(F)``;
      Astraea: the largest throughput so far); the environment keeps the rows of flows that
      decided;
    * ``global_state(view) -> (critic_dim,)``: the critic-only input for one deciding flow;
    * ``reward(view) -> (scalar, objectives (len(objectives),))`` for one deciding flow;
    * ``window``: how many of its past MTPs ``LinkView.thr_hist`` holds;
    * ``empty``: the value of a history slot before the flow's first step.
    """

    name: str
    n_features: int
    local: Callable[[FlowMI, Any], tuple[jnp.ndarray, Any]]
    init_carry: Callable[[int], Any]
    critic_dim: int
    global_state: Callable[[LinkView], jnp.ndarray]
    reward: Callable[[LinkView], tuple[jnp.ndarray, jnp.ndarray]]
    objectives: tuple[str, ...]
    window: int = 5
    empty: float = 0.0


# ---------------------------------------------------------------------------------------------
# Astraea's local state (§3.3), global state (Table 2) and reward (Eqs. 4-8)

#: Scales of the two features Astraea keeps unnormalised (thr_max, lat_min) and of the global
#: state. The paper is silent on units and scales; these are the released code's constants
#: (notes §8: max_tput / 1e7 bytes/s, min_rtt / 5e5 us, sums of throughput / 5e7 bytes/s,
#: cwnd / 1000 packets, num_flows / 10, one-way delay / 500 ms, bandwidth / 500 Mbps), in SI.
THR_SCALE = 1e7  # bytes/s (80 Mbps)
LAT_SCALE = 0.5  # s
GLOBAL_THR_SCALE = 5e7  # bytes/s (400 Mbps)
GLOBAL_CWND_SCALE = 1000.0  # packets
GLOBAL_FLOWS_SCALE = 10.0
GLOBAL_BUF_SCALE = 10.0  # buffer in BDPs (the code's "bdp / 10")
GLOBAL_BW_SCALE = 500e6 / 8  # bytes/s (500 Mbps)
#: Bound on every ratio feature. Silent in the paper; the released code clips some ratios at 2,
#: which would hide any queue above one base RTT, and the training buffers reach 16 BDP; 10
#: keeps the network's input bounded (a stalled flow's ratios can otherwise be ~1e6) while a
#: latency ratio still tells 2 BDP of queue from 8.
RATIO_CAP = 10.0
N_ASTRAEA_FEATURES = 8
N_ASTRAEA_GLOBAL = 12
ASTRAEA_OBJECTIVES = ("thr", "lat", "loss", "fair", "stab")


def astraea_carry(n_flows: int) -> jnp.ndarray:
    """(F,) the largest per-MTP throughput each flow has had (bytes/s): thr_max of §3.3."""
    return jnp.zeros(n_flows, jnp.float32)


def astraea_local(mi: FlowMI, thr_max: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Astraea §3.3's 8 features of each flow's MTP, (F, 8), and the updated thr_max:

    thr / thr_max, thr_max, lat / lat_min, lat_min, cwnd / (thr_max lat_min), loss / thr_max,
    in-flight / cwnd, pacing / thr_max. ``thr`` is the MTP's delivery rate (acked bytes/s),
    ``lat`` its mean RTT, ``lat_min`` the least RTT the sender has seen (the paper's "min over
    the flow's whole history"), ``loss`` its lost bytes/s. Before the flow has delivered
    anything (thr_max = 0) the ratios over thr_max read 0 (silent in the paper; the code's
    empty history is zeros too)."""
    s = mi.stats
    thr = s.delivery_rate
    thr_max = jnp.maximum(thr_max, thr)
    has = thr_max > 0
    inv = jnp.where(has, 1.0 / jnp.maximum(thr_max, 1e-30), 0.0)
    lat_min = jnp.maximum(s.min_rtt, 1e-9)
    lost_rate = s.lost_bytes / jnp.maximum(s.duration_s, 1e-9)
    cwnd = jnp.maximum(mi.cwnd, 1.0)
    cap = lambda x: jnp.clip(x, 0.0, RATIO_CAP)  # noqa: E731
    feat = jnp.stack([
        cap(thr * inv),
        thr_max / THR_SCALE,
        cap(s.rtt_mean / lat_min),
        lat_min / LAT_SCALE,
        cap(cwnd * inv / lat_min),
        cap(lost_rate * inv),
        cap(s.inflight / cwnd),
        cap(mi.pacing * inv),
    ], -1)
    return feat.astype(jnp.float32), thr_max


def _masked_stats(x: jnp.ndarray, m: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
    """(sum, min, max, mean) of ``x`` over the flows ``m`` (0 for an empty mask)."""
    n = m.sum()
    any_ = n > 0
    total = jnp.where(m, x, 0.0).sum()
    lo = jnp.where(any_, jnp.where(m, x, jnp.inf).min(), 0.0)
    hi = jnp.where(any_, jnp.where(m, x, -jnp.inf).max(), 0.0)
    return total, lo, hi, total / jnp.maximum(n, 1)


def astraea_global(v: LinkView) -> jnp.ndarray:
    """Astraea Table 2's global state over the active flows, (12,), scaled by the released
    code's constants (``GLOBAL_*``): total, min and max throughput; mean latency; min, max and
    mean cwnd; mean loss ratio; flow count; base one-way delay d_0; buffer; bandwidth.

    With per-flow RTTs the link has no single d_0 (silent in the paper): the active flows'
    mean base RTT / 2. The buffer is given in BDPs of the link's capacity times that mean base
    RTT (the code's "bdp / 10"; Table 3's buffer factor). Not stacked over time (the code's
    global state is one 12-vector, notes §2.3)."""
    a = v.alive
    n = a.sum()
    thr_sum, thr_lo, thr_hi, _ = _masked_stats(v.throughput, a)
    _, _, _, lat = _masked_stats(v.rtt_mean, a)
    cw = v.cwnd / PACKET_BYTES
    _, cw_lo, cw_hi, cw_mean = _masked_stats(cw, a)
    _, _, _, loss = _masked_stats(v.loss_ratio, a)
    _, _, _, base = _masked_stats(v.base_rtt, a)
    bdp = jnp.maximum(v.capacity * base, 1.0)
    return jnp.stack([
        thr_sum / GLOBAL_THR_SCALE, thr_lo / GLOBAL_THR_SCALE, thr_hi / GLOBAL_THR_SCALE,
        lat / LAT_SCALE,
        cw_lo / GLOBAL_CWND_SCALE, cw_hi / GLOBAL_CWND_SCALE, cw_mean / GLOBAL_CWND_SCALE,
        loss,
        n / GLOBAL_FLOWS_SCALE,
        0.5 * base / LAT_SCALE,
        v.buffer_bytes / bdp / GLOBAL_BUF_SCALE,
        v.capacity / GLOBAL_BW_SCALE,
    ]).astype(jnp.float32)


@dataclass(frozen=True)
class AstraeaReward:
    """Astraea Eq. 8 over the active flows of the link during the deciding flow's MTP:
    R = c0 R_thr - c1 R_lat - c2 R_loss - c3 R_fair - c4 R_stab, bounded to +-``bound``.

    * R_thr = sum_i thr_i / c (Eq. 4);
    * R_loss = (1/n) sum_i loss_i / thr_i (Eq. 4), taken as lost / (acked + lost): equal for
      small loss, and bounded where a flow's MTP delivered nothing (silent in the paper);
    * R_lat (Eq. 5) = ((1/n) sum_i lat_i - (1+beta) d_0) x p_rate when positive. The paper's
      units are silent; here both factors are made scale-free, the excess over d_0 (the flows'
      mean base RTT: lat is an RTT too) and the flows' total pacing rate over c, so Table 4's
      weights mean the same on a 40 and a 160 Mbps link, a 10 and a 140 ms one;
    * R_fair (Eq. 6) = sqrt(sum_i (avg_i - mean)^2 / (n (sum_i avg_i)^2)), avg_i the flow's mean
      throughput over the last w MTPs (Eq. 7) of the deciding flow; ``fair_cv`` takes instead
      the plain coefficient of variation, n times as large, which is what the Fig. 4 text's
      0.19 at a 60/40 split matches (Eq. 6 as printed gives 0.10; notes §2.5);
    * R_stab (Eq. 6) = (1/n) sum_i sqrt(sum_j (thr_ij - avg_i)^2 / (w avg_i^2)): each flow's
      coefficient of variation over those w MTPs, averaged. A flow alive for fewer of them
      uses those it was alive for (a new flow has no past to be unstable in).

    Returns (R, (R_thr, R_lat, R_loss, R_fair, R_stab)); n counts every active flow, agents
    and classic flows alike (the link's fairness, as the global state counts them).
    """

    c0: float = 0.1  # Table 4
    c1: float = 0.02  # Table 4
    c2: float = 1.0  # Table 4
    c3: float = 0.02  # Table 4
    c4: float = 0.01  # Table 4
    #: Eq. 5's tolerance of queueing delay. Silent in the paper (even Table 4); 0.25 chosen:
    #: a queue of a quarter of the base RTT is not penalised, about what a flow paced at
    #: cwnd / sRTT keeps while it probes for 2.5 % more every MTP (Eq. 3)
    beta: float = 0.25
    #: "We bound the reward and scale it to (-0.1, 0.1)" (§3.3), method silent: a clip, which
    #: leaves Eq. 8 unchanged inside the range (its positive side, c0 R_thr <= 0.1 at full
    #: utilisation, already lies in it) where a tanh would bend it everywhere
    bound: float = 0.1
    fair_cv: bool = False

    def __call__(self, v: LinkView) -> tuple[jnp.ndarray, jnp.ndarray]:
        a = v.alive
        n = jnp.maximum(a.sum(), 1)
        cap = jnp.maximum(v.capacity, 1e-9)
        r_thr = jnp.where(a, v.throughput, 0.0).sum() / cap
        r_loss = jnp.where(a, v.loss_ratio, 0.0).sum() / n
        lat = jnp.where(a, v.rtt_mean, 0.0).sum() / n
        d0 = jnp.maximum(jnp.where(a, v.base_rtt, 0.0).sum() / n, 1e-9)
        pacing = jnp.where(a, v.pacing, 0.0).sum() / cap
        r_lat = jnp.maximum(lat - (1.0 + self.beta) * d0, 0.0) / d0 * pacing
        # Eq. 7's windows: the entries of the last w MTPs in which each active flow was alive
        m = v.hist_alive & a[None, :]
        cnt = m.sum(0)
        use = a & (cnt > 0)
        nu = jnp.maximum(use.sum(), 1)
        h = jnp.where(m, v.thr_hist, 0.0)
        avg = h.sum(0) / jnp.maximum(cnt, 1)
        tot = jnp.where(use, avg, 0.0).sum()
        mu = tot / nu
        dev2 = jnp.where(use, (avg - mu) ** 2, 0.0).sum()
        if self.fair_cv:
            r_fair = jnp.sqrt(dev2 / nu) / jnp.maximum(mu, 1e-9)
        else:
            r_fair = jnp.sqrt(dev2 / (nu * jnp.maximum(tot, 1e-9) ** 2))
        r_fair = jnp.where(tot > 0, r_fair, 0.0)
        var_t = jnp.where(m, (v.thr_hist - avg[None, :]) ** 2, 0.0).sum(0)
        cv_t = jnp.sqrt(var_t / (jnp.maximum(cnt, 1) * jnp.maximum(avg, 1e-9) ** 2))
        r_stab = jnp.where(use & (avg > 0), cv_t, 0.0).sum() / nu
        r = (self.c0 * r_thr - self.c1 * r_lat - self.c2 * r_loss - self.c3 * r_fair
             - self.c4 * r_stab)
        obj = jnp.stack([r_thr, r_lat, r_loss, r_fair, r_stab]).astype(jnp.float32)
        return jnp.clip(r, -self.bound, self.bound).astype(jnp.float32), obj


#: Astraea's observation and reward: w = 5 (Table 4, history length and Eq. 7's window)
ASTRAEA = MultiFlowFns(
    name="astraea", n_features=N_ASTRAEA_FEATURES, local=astraea_local,
    init_carry=astraea_carry, critic_dim=N_ASTRAEA_GLOBAL, global_state=astraea_global,
    reward=AstraeaReward(), objectives=ASTRAEA_OBJECTIVES, window=5, empty=0.0)
MULTI_FLOW_FNS: dict[str, MultiFlowFns] = {"astraea": ASTRAEA}


# ---------------------------------------------------------------------------------------------
# The senders: agent flows and classic ones, as one controller of the simulator


class SendersParams(struct.PyTreeNode):
    agent: jnp.ndarray  # (F,) bool: the flow's window is the agent's
    mtp_s: jnp.ndarray  # () the agents' MTP
    init_cwnd: jnp.ndarray  # (F,) bytes: the agents' first window (read by ``init``)
    cross: Any  # the classic controller's params, () without one


@dataclass(frozen=True)
class Senders:
    """The simulator's controller for a multi-flow link: agent flows keep the window the
    environment set (their controller state) and pace at cwnd / sRTT (Astraea §3.3), the pacing
    refreshed at each MTP's end from the sender's smoothed RTT (silent in the paper: the kernel
    recomputes it per ACK; a rate fixed over the MTP keeps the flow's MI clock at the MTP,
    which a rate-0 window sender's loss reports would cut short, ``core.tick_begin``); the
    other flows run ``cross``."""

    cross: Controller | None = None
    name: str = "multi-flow"

    def _merge(self, agent: jnp.ndarray, mine: Decision, cross: Decision) -> Decision:
        return jax.tree.map(lambda a, c: jnp.where(agent, a, c), mine, cross)

    def _mine(self, cwnd: jnp.ndarray, srtt: jnp.ndarray, mtp_s: jnp.ndarray) -> Decision:
        F = cwnd.shape[0]
        return Decision(rate=cwnd / jnp.maximum(srtt, 1e-9), cwnd=cwnd,
                        mi_s=jnp.full(F, mtp_s, jnp.float32), mi_round=jnp.zeros(F, bool))

    def init(self, params: SendersParams, base_rtt_s: jnp.ndarray) -> tuple[Any, Decision]:
        cwnd = params.init_cwnd.astype(jnp.float32)
        dec = self._mine(cwnd, base_rtt_s, params.mtp_s)
        if self.cross is None:
            return (cwnd, ()), dec
        cstate, cdec = self.cross.init(params.cross, base_rtt_s)
        return (cwnd, cstate), self._merge(params.agent, dec, cdec)

    def on_interval(self, state: Any, stats: MIStats, params: SendersParams
                    ) -> tuple[Any, Decision]:
        cwnd, cstate = state
        dec = self._mine(cwnd, stats.srtt, params.mtp_s)
        if self.cross is None:
            return state, dec
        cstate, cdec = self.cross.on_interval(cstate, stats, params.cross)
        return (cwnd, cstate), self._merge(params.agent, dec, cdec)


# ---------------------------------------------------------------------------------------------
# The environment


class MultiFlowParams(struct.PyTreeNode):
    """Dynamic parameters (a sweep is a ``vmap`` over them)."""

    links: LinkParams  # pool of links (leading axis P); each episode draws one uniformly
    agent: jnp.ndarray  # (F,) bool: flows the policy drives; the others run ``cross``
    alpha: jnp.ndarray  # Eq. 3's action coefficient (Table 4: 0.025)
    mtp_s: jnp.ndarray  # the MTP (Table 4: 30 ms)
    init_lo: jnp.ndarray  # packets: each agent flow's first window is U(init_lo, init_hi),
    init_hi: jnp.ndarray  # rounded
    min_cwnd: jnp.ndarray  # packets: window bounds of the agents (Eq. 3's result is clipped)
    max_cwnd: jnp.ndarray
    end_tick: jnp.ndarray  # int32: the episode's length in ticks (the link schedule's duration)
    cross: Any = ()  # the classic controller's params, () without one
    link_index: Any = -1  # >= 0: every episode uses this link of the pool
    #: no preference: kept, empty, for ``VecEnv``'s per-environment parameter axes
    pref: Any = struct.field(default_factory=lambda: jnp.zeros((0,), jnp.float32))


class MultiFlowState(struct.PyTreeNode):
    sim: SimState
    link: LinkParams  # this episode's link
    agent: jnp.ndarray  # (F,) bool: agent flows of this link (``params.agent`` & present)
    cwnd: jnp.ndarray  # (F,) packets: the agents' windows
    hist: jnp.ndarray  # (F, history, n_features) each flow's last steps, oldest first
    carry: Any  # the feature set's per-flow running values
    critic: jnp.ndarray  # (F, critic_dim) global state at each flow's last decision
    #: (F, F, 4) for each flow i, every flow's cumulative (acked, lost, RTT x bytes, RTT bytes)
    #: when i's running MTP began: the difference at its end is the link over that MTP
    snap: jnp.ndarray
    t_begin: jnp.ndarray  # (F,) int32 tick at which each flow's running MTP began
    thr_hist: jnp.ndarray  # (F, W, F) every flow's throughput over each flow's last W MTPs
    hist_alive: jnp.ndarray  # (F, W, F) bool: ...and whether it was alive then
    #: (F,) bool: the flow is not ready to act (mid-MTP, not arrived, gone or no agent): its
    #: action is ignored
    mid: jnp.ndarray
    acted: jnp.ndarray  # (F,) bool: an action began the running MTP (not a first MTP)
    t0: jnp.ndarray  # () int32 tick at which this step began
    end_tick: jnp.ndarray  # () int32 tick at which the episode ends (``params.end_tick``)
    ret: jnp.ndarray  # (F,) reward summed over the episode's valid steps
    steps: jnp.ndarray  # (F,) int32 valid steps in this episode


class MultiStepInfo(struct.PyTreeNode):
    """What a step measured, per flow (leaves (F,) unless noted; zeros where not ``valid``)."""

    objectives: jnp.ndarray  # (F, K) the reward's terms
    utilization: jnp.ndarray  # the link's throughput / capacity over the flow's MTP
    latency_ratio: jnp.ndarray  # the flow's mean RTT / its least RTT over the MTP
    loss_rate: jnp.ndarray  # the flow's lost / (acked + lost) over the MTP
    cwnd_pkts: jnp.ndarray  # the flow's window (packets) after the step
    decided: jnp.ndarray  # bool: the flow's MTP ended (valid, or its first MTP's end)
    alive: jnp.ndarray  # bool: the flow was active at the step's last tick
    valid: jnp.ndarray  # bool: a transition of the flow ended (an action's whole MTP)
    terminated: jnp.ndarray  # bool: never (episodes end at their time limit)
    episode_return: jnp.ndarray  # the flow's return where the episode ended, else 0
    episode_done: jnp.ndarray  # bool: the episode ended and the flow is an agent
    next_obs: Any = ()  # (F, obs_dim) after the step, before any reset (drivers move it)
    next_critic: Any = ()  # (F, critic_dim)
    critic: Any = ()  # the returned state's critic input (``VecEnv`` fills it)


@dataclass(frozen=True)
class MultiFlowEnv:
    """Static configuration (DESIGN principle 2): the simulator, the observation and reward
    functions, the history length, the action map and the classic controller."""

    sim: SimConfig
    fns: MultiFlowFns = ASTRAEA
    history: int = 5  # Table 4: history length w = 5 MTPs
    action_map: str = "astraea"  # envs.actions.WINDOW_ACTION_MAPS
    cross: Controller | None = None
    #: guard: a step with no event for this many ticks ends (no agent flow alive for a minute)
    max_step_ticks: int = 60_000

    @property
    def n_flows(self) -> int:
        return self.sim.n_flows

    @property
    def obs_dim(self) -> int:
        return self.history * self.fns.n_features

    @property
    def critic_dim(self) -> int:
        return self.fns.critic_dim

    @property
    def action_space(self) -> ActionSpace:
        kind, n = WINDOW_ACTION_MAPS[self.action_map]
        return ActionSpace(kind, n)

    @property
    def spec(self) -> EnvSpec:
        K = len(self.fns.objectives)
        return EnvSpec(obs_dim=self.obs_dim, critic_dim=self.critic_dim,
                       action=self.action_space, n_objectives=K, pref_dim=0,
                       objective_names=tuple(self.fns.objectives),
                       agents_per_link=self.n_flows)

    # -- pieces ------------------------------------------------------------------------------

    def _senders(self) -> Senders:
        return Senders(self.cross)

    def senders_params(self, st: MultiFlowState, params: MultiFlowParams) -> SendersParams:
        return SendersParams(agent=st.agent, mtp_s=params.mtp_s,
                             init_cwnd=st.cwnd * PACKET_BYTES, cross=params.cross)

    @staticmethod
    def alive(link: LinkParams, t: jnp.ndarray) -> jnp.ndarray:
        """(F,) the flows that send in tick ``t`` (the simulator's ``active``)."""
        return link.present & (t >= link.start_tick) & (t < link.stop_tick)

    def _empty_hist(self) -> jnp.ndarray:
        return jnp.full((self.n_flows, self.history, self.fns.n_features), self.fns.empty,
                        jnp.float32)

    def _obs(self, hist: jnp.ndarray) -> jnp.ndarray:
        return hist.reshape(hist.shape[0], -1)

    @staticmethod
    def _counters(sim: SimState) -> jnp.ndarray:
        """(F, 4) cumulative acked and lost bytes, RTT x acked bytes and RTT-sampled bytes."""
        return jnp.stack([sim.acked, sim.lost, sim.tot.rtt_sum, sim.tot.rtt_w], -1)

    def critic_obs(self, st: MultiFlowState, params: MultiFlowParams) -> jnp.ndarray:
        """(F, critic_dim): each flow's global state, compiled when it last decided (Astraea
        §4.2: the Observer builds it on each flow's action request); zeros before."""
        del params
        return st.critic

    # -- reset -------------------------------------------------------------------------------

    def reset(self, key: jnp.ndarray, params: MultiFlowParams
              ) -> tuple[jnp.ndarray, MultiFlowState]:
        k_link, k_cwnd, k_sim = jax.random.split(key, 3)
        n = params.links.buffer_bytes.shape[0]
        i = jnp.where(jnp.asarray(params.link_index) >= 0, params.link_index,
                      jax.random.randint(k_link, (), 0, n))
        link = jax.tree.map(lambda x: x[i], params.links)
        F, W = self.n_flows, self.fns.window
        agent = params.agent & link.present
        u = jax.random.uniform(k_cwnd, (F,), minval=params.init_lo, maxval=params.init_hi)
        cwnd = jnp.clip(jnp.round(u), params.min_cwnd, params.max_cwnd).astype(jnp.float32)
        sp = SendersParams(agent=agent, mtp_s=params.mtp_s, init_cwnd=cwnd * PACKET_BYTES,
                           cross=params.cross)
        sim = init_state(self.sim, link, self._senders(), sp, k_sim)
        hist = self._empty_hist()
        st = MultiFlowState(
            sim=sim, link=link, agent=agent, cwnd=cwnd, hist=hist,
            carry=self.fns.init_carry(F),
            critic=jnp.zeros((F, self.critic_dim), jnp.float32),
            snap=jnp.zeros((F, F, 4), jnp.float32), t_begin=jnp.zeros(F, jnp.int32),
            thr_hist=jnp.zeros((F, W, F), jnp.float32),
            hist_alive=jnp.zeros((F, W, F), bool),
            # every flow starts unready: those alive at tick 0 run their first MTP without an
            # action (the simulator's MIs all begin at tick 0), the others wait to arrive
            mid=jnp.ones(F, bool), acted=jnp.zeros(F, bool), t0=jnp.zeros((), jnp.int32),
            end_tick=jnp.asarray(params.end_tick, jnp.int32),
            ret=jnp.zeros(F, jnp.float32), steps=jnp.zeros(F, jnp.int32))
        return self._obs(hist), st

    # -- the TickEnv protocol ----------------------------------------------------------------

    def begin(self, st: MultiFlowState, action: jnp.ndarray, params: MultiFlowParams
              ) -> MultiFlowState:
        """Start the MTPs of the ready agent flows: Eq. 3 on their windows, paced at cwnd /
        sRTT from now. Flows that are not ready (``mid``) ignore their action."""
        F = self.n_flows
        sim = st.sim
        a = jnp.reshape(action, (F,)).astype(jnp.float32)
        start = st.agent & ~st.mid & self.alive(st.link, sim.t)
        new = apply_window_action(self.action_map, st.cwnd, a, params.alpha, params.min_cwnd,
                                  params.max_cwnd, jnp)
        cwnd = jnp.where(start, new, st.cwnd)
        cw_b = cwnd * PACKET_BYTES
        held, cstate = sim.cc
        dec = sim.decision
        rate = cw_b / jnp.maximum(sim.srtt, 1e-9)
        sim = sim.replace(cc=(jnp.where(start, cw_b, held), cstate),
                          decision=dec._replace(rate=jnp.where(start, rate, dec.rate),
                                                cwnd=jnp.where(start, cw_b, dec.cwnd)))
        # (a flow that decided and has now left stays unready for good)
        return st.replace(sim=sim, cwnd=cwnd, mid=st.mid | start | ~self.alive(st.link, sim.t),
                          acted=jnp.where(start, True, st.acted), t0=sim.t)

    def _events(self, st: MultiFlowState, sim: SimState) -> tuple[jnp.ndarray, jnp.ndarray]:
        """(decided, arrived), (F,) each: agent flows whose MTP ended in a tick they were alive,
        and agent flows that send from the next tick on for the first time; both only after
        at least one tick of this step."""
        ticked = sim.t > st.t0
        decided = ticked & sim.mi_done & st.agent & self.alive(st.link, sim.t - 1)
        arrived = (ticked & st.agent & (st.link.start_tick == sim.t)
                   & (st.link.stop_tick > sim.t))
        return decided, arrived

    def mi_running(self, st: MultiFlowState, sim: SimState) -> jnp.ndarray:
        """True while the link has no event (a flow's MTP end or arrival), the episode goes
        on and the step's tick guard is not reached."""
        decided, arrived = self._events(st, sim)
        return (~jnp.any(decided | arrived) & (sim.t < st.t0 + self.max_step_ticks)
                & (sim.t < st.end_tick))

    def sim_tick(self, st: MultiFlowState, params: MultiFlowParams,
                 live: jnp.ndarray | None = None) -> SimState:
        return tick(self.sim, self._senders(), st.link, self.senders_params(st, params),
                    st.sim, live=live)

    def link_view(self, st: MultiFlowState, sim: SimState) -> LinkView:
        """The link over each flow's running MTP, ended now: a ``LinkView`` whose leaves have a
        leading axis over the deciding flow i (only the rows of flows that decided mean
        anything), its throughput row pushed onto each flow's window of past MTPs."""
        F, dt = self.n_flows, self.sim.tick_s
        d = self._counters(sim)[None, :, :] - st.snap  # (F_i, F_j, 4)
        ticks = jnp.maximum(sim.t - st.t_begin, 1).astype(jnp.float32)  # (F_i,)
        dur = ticks * dt
        acked, lost, rsum, rw = d[..., 0], d[..., 1], d[..., 2], d[..., 3]
        # (float32 differences of cumulative sums can come out a rounding error below 0)
        acked, lost = jnp.maximum(acked, 0.0), jnp.maximum(lost, 0.0)
        thr = acked / dur[:, None]
        fb = acked + lost
        rtt = jnp.where(rw > 0, rsum / jnp.maximum(rw, 1e-30), sim.srtt[None, :])
        t1 = sim.t.astype(jnp.float32)
        cap = (capacity.cum(st.link.sched, t1)
               - capacity.cum(st.link.sched, t1 - ticks)) / dur
        win = jnp.maximum(sim.decision.cwnd, self.sim.min_cwnd)
        win = jnp.where(jnp.isfinite(win), win, sim.flight)  # a rate sender has no window
        pace = jnp.where(sim.decision.rate > 0, sim.decision.rate,
                         win / jnp.maximum(sim.srtt, 1e-9))
        alive = self.alive(st.link, sim.t - 1)
        bc = lambda x: jnp.broadcast_to(x, (F,) + jnp.shape(x))  # noqa: E731
        push = lambda h, row: jnp.concatenate([h[:, 1:], row[:, None]], 1)  # noqa: E731
        return LinkView(
            duration_s=dur, alive=bc(alive), own=jnp.eye(F, dtype=bool), throughput=thr,
            lost_rate=lost / dur[:, None],
            loss_ratio=jnp.where(fb > 0, lost / jnp.maximum(fb, 1e-30), 0.0),
            rtt_mean=rtt, base_rtt=bc(data_rtt_floor_s(st.link, self.sim)), cwnd=bc(win),
            pacing=bc(pace), capacity=cap, buffer_bytes=bc(st.link.buffer_bytes),
            thr_hist=push(st.thr_hist, thr), hist_alive=push(st.hist_alive, bc(alive)))

    def end(self, st: MultiFlowState, sim: SimState, params: MultiFlowParams
            ) -> tuple[jnp.ndarray, MultiFlowState, jnp.ndarray, jnp.ndarray, MultiStepInfo]:
        """Observations, rewards and info of the flows whose MTP ended in ``sim``; arrivals
        start their first MTP; every other flow's outputs repeat (``valid`` false)."""
        F = self.n_flows
        decided, arrived = self._events(st, sim)
        valid = decided & st.acted
        view = self.link_view(st, sim)  # the link over each flow's MTP (Eq. 7's window too)
        alive_end = view.alive[0]
        g = jax.vmap(self.fns.global_state)(view)
        reward, obj = jax.vmap(self.fns.reward)(view)
        # each flow's own MTP -> its features (the window it was held to, its pacing now)
        win = jnp.where(st.agent, st.cwnd * PACKET_BYTES, view.cwnd[0])
        feat, carry = self.fns.local(FlowMI(stats=sim.last, cwnd=win, pacing=view.pacing[0]),
                                     st.carry)
        hist = jnp.concatenate([st.hist[:, 1:], feat[:, None]], 1)

        def pick(mask, new, old):
            m = mask.reshape(mask.shape + (1,) * (new.ndim - 1))
            return jnp.where(m, new, old)

        now = self._counters(sim)
        new = st.replace(
            sim=sim,
            hist=pick(decided, hist, st.hist),
            carry=jax.tree.map(lambda n, o: pick(decided, n, o), carry, st.carry),
            critic=pick(decided, g, st.critic),
            snap=pick(decided | arrived, jnp.broadcast_to(now, (F,) + now.shape), st.snap),
            t_begin=jnp.where(decided | arrived, sim.t, st.t_begin),
            thr_hist=pick(decided, view.thr_hist, st.thr_hist),
            hist_alive=pick(decided, view.hist_alive, st.hist_alive),
            mid=st.mid & ~decided, acted=st.acted & ~decided & ~arrived)
        new = self._arrive(new, arrived, params)
        r = jnp.where(valid, reward, 0.0).astype(jnp.float32)
        ret = new.ret + r
        done_link = sim.t >= st.end_tick
        done = jnp.broadcast_to(done_link, (F,))
        new = new.replace(ret=ret, steps=new.steps + valid.astype(jnp.int32))
        obs = self._obs(new.hist)
        z = lambda x: pick(valid, x, jnp.zeros_like(x))  # noqa: E731
        own = jnp.eye(F, dtype=bool)
        own_rtt = jnp.where(own, view.rtt_mean, 0.0).sum(1)
        own_loss = jnp.where(own, view.loss_ratio, 0.0).sum(1)
        util = jnp.where(view.alive, view.throughput, 0.0).sum(1) / jnp.maximum(
            view.capacity, 1e-9)
        info = MultiStepInfo(
            objectives=z(obj), utilization=z(util),
            latency_ratio=z(own_rtt / jnp.maximum(sim.min_rtt, 1e-9)), loss_rate=z(own_loss),
            cwnd_pkts=new.cwnd, decided=decided, alive=alive_end, valid=valid,
            terminated=jnp.zeros(F, bool),
            episode_return=jnp.where(done & new.agent, ret, 0.0),
            episode_done=done & new.agent, next_obs=obs,
            next_critic=self.critic_obs(new, params))
        return obs, new, r, done, info

    def _arrive(self, st: MultiFlowState, arrived: jnp.ndarray, params: MultiFlowParams
                ) -> MultiFlowState:
        """Agent flows that send from now on: their first MTP starts now, at the initial window
        and with an empty history. Their simulator MI is restarted at this tick (it has been
        running, empty, since tick 0), so the first MTP is a whole MTP from the arrival."""
        F = self.n_flows
        sim = st.sim

        def pick(new, old):
            m = arrived.reshape(arrived.shape + (1,) * (new.ndim - 1))
            return jnp.where(m, new, old)

        fresh_mi = jax.tree.map(pick, MIAccum.zeros(F, self.sim.rtt_bins), sim.mi)
        # (rounded as the simulator rounds an MI, ``core._mi_ticks``)
        mi_len = jnp.clip(jnp.floor(params.mtp_s / self.sim.tick_s + 0.5 + 1e-4), 1, 1e9
                          ).astype(jnp.int32)
        sim = sim.replace(mi=fresh_mi, mi_len=jnp.where(arrived, mi_len, sim.mi_len))
        empty = self._empty_hist()
        return st.replace(
            sim=sim, hist=pick(empty, st.hist),
            carry=jax.tree.map(pick, self.fns.init_carry(F), st.carry),
            critic=pick(jnp.zeros_like(st.critic), st.critic),
            thr_hist=pick(jnp.zeros_like(st.thr_hist), st.thr_hist),
            hist_alive=pick(jnp.zeros_like(st.hist_alive), st.hist_alive))

    # -- single-link stepping ----------------------------------------------------------------

    def step_env(self, key: jnp.ndarray, st: MultiFlowState, action: jnp.ndarray,
                 params: MultiFlowParams
                 ) -> tuple[jnp.ndarray, MultiFlowState, jnp.ndarray, jnp.ndarray,
                            MultiStepInfo]:
        """Tick until the link's next event, without auto-reset."""
        del key  # the simulator carries its own key (packet-model draws)
        st = self.begin(st, action, params)
        sim = jax.lax.while_loop(lambda s: self.mi_running(st, s),
                                 lambda s: self.sim_tick(st.replace(sim=s), params), st.sim)
        return self.end(st, sim, params)

    def step(self, key: jnp.ndarray, st: MultiFlowState, action: jnp.ndarray,
             params: MultiFlowParams
             ) -> tuple[jnp.ndarray, MultiFlowState, jnp.ndarray, jnp.ndarray, MultiStepInfo]:
        """``step_env`` with gymnax's auto-reset: where the episode ended a fresh one begins."""
        k_step, k_reset = jax.random.split(key)
        obs, st, reward, done, info = self.step_env(k_step, st, action, params)
        obs_r, st_r = self.reset(k_reset, params)
        d = jnp.any(done)
        st = jax.tree.map(lambda r, s: jnp.where(d, r, s), st_r, st)
        obs = jnp.where(d, obs_r, obs)
        return obs, st, reward, done, info
