"""MOCC's and Aurora's single-flow environment, gymnax-style, over the simulator.

One agent flow (flow 0) per link sends at a rate it changes once per monitor interval (MI);
optional classic cross traffic (flows 1..F-1) shares the bottleneck. Everything is a pure
function of explicit pytrees, so a batch of links, preferences and seeds is a ``vmap``:

* ``reset(key, params) -> (obs, state)`` draws a link from ``params.links`` (a pool of links
  sampled from a scenario before tracing) and an initial rate;
* ``step(key, state, action, params) -> (obs, state, reward, done, info)`` applies MOCC Eq. 1,
  runs the simulator tick by tick until the agent's MI ends, and returns the new observation,
  the scalar reward w^T O, ``done`` at the episode's end and a ``StepInfo`` (vector reward and
  link metrics); at ``done`` the returned observation and state are a fresh episode's
  (auto-reset, as gymnax does it). ``step_env`` is the same without the reset. A batch of
  environments steps through ``ccjax.envs.vec.VecEnv``, which may cut a step short after a
  budget of ticks: links' MIs differ in length, and waiting for the longest one would idle the
  rest. A cut step returns ``info.valid`` false and ignores the next action (the MI goes on);
  learners mask such steps out.

Semantics follow Aurora's simulator (PCC-RL ``network_sim.py``), on which MOCC's is built:

* observation = preference w (3, omitted when ``use_pref`` is false) followed by the history of
  the last ``history`` MIs' features (sending ratio, latency ratio, latency gradient; oldest
  first; ``ccjax.envs.features``), flattened: 3 + 3 x 10 = 33 values by default; with
  ``log_ratios`` the two ratios enter as logs (``features.encode``);
  ``features = "auto"`` gives AUTO's five per MI instead (Eq. 4, with the previous action) and
  ``action_map = "auto"`` its seven multipliers (Eq. 7), ``params.mi_min_rtts`` its MI cap
  (Eq. 6) and ``reward = auto_reward`` its two objectives (Eq. 5): K = 2 preference weights;
* action a (continuous): rate <- rate x (1 + alpha a) if a >= 0 else rate / (1 - alpha a),
  alpha = 0.025 (MOCC Eq. 1, Table 2), the result kept within [min_rate, max_rate];
* the first MI lasts 3 x the link's one-way latency, every later MI 0.5 x the mean RTT measured
  in the previous MI (Aurora); the initial rate is U(0.3, 1.5) x the link's capacity (Aurora);
  unlike Aurora's ``reset``, which runs two MIs before the first observation, the first action
  is taken on the empty history and the first MI is rewarded (its ACKs arrive only in its last
  third, so its sending ratio is about 3 and its utilization a third of the rate's);
* reward: a pluggable ``RewardFn`` (``ccjax.envs.rewards``), MOCC's Eq. 2 by default, using the
  link's true capacity over the MI and its base RTT.

``critic_features`` (off by default) gives the critic ``N_CRITIC`` facts about the link and the
episode as its own input (``critic_obs``; ``Trajectory.critic``; an asymmetric actor-critic:
Pinto et al., "Asymmetric Actor Critic for Image-Based Robot Learning", RSS 2018): the
sending rate over the link's
capacity, its random loss, its base RTT, a packet's transmission time over the base RTT, the
last MI's RTT over the base RTT, and the share of the episode left. The actor reads only the
observation (MOCC's state), so the trained policy, its export and its deployment are
unchanged; what changes is the critic's baseline. Why: MOCC's state is relative
(ratios to the flow's own history), so it cannot tell the critic how far below capacity the
flow is or how good a link's latency can get, and the return differs from link to link by more
than any one action changes it; at w = <0.1, 0.8, 0.1> the gain of sending at 0.9 rather than
0.2 of capacity is 0.052 per MI on ``mocc-train`` (constant-rate senders, docs/results/mocc.md),
and the critic's errors drowned it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from ccjax.cc.base import Controller, Decision
from ccjax.envs.actions import ACTION_MAPS, action_feature, apply_action
from ccjax.envs.features import FEATURE_SETS, FeatureSet, encode, push, state_dim
from ccjax.envs.rewards import OBJECTIVES, MIOutcome, RewardFn, mocc_reward
from ccjax.envs.spec import ActionSpace, EnvSpec
from ccjax.sim import capacity
from ccjax.sim.core import SimState, data_rtt_floor_s, init_state, tick
from ccjax.sim.link import LinkParams, SimConfig
from ccjax.sim.stats import MIStats
from ccjax.units import PACKET_BYTES

#: link and episode facts appended for the critic when ``critic_features`` is on
N_CRITIC = 6


class SlotParams(struct.PyTreeNode):
    """Parameters of the agent's slot in the simulator (see ``AgentSlot``)."""

    init_rate: jnp.ndarray  # () bytes/s of the agent before its first action
    mi_rtts: jnp.ndarray  # () MI length in mean RTTs of the previous MI (Aurora: 0.5)
    first_mi_s: jnp.ndarray  # () length of the first MI (Aurora: 3 x one-way latency)
    cross: Any  # the cross-traffic controller's params, () without one
    #: () MI length cap in minimum RTTs: AUTO Eq. 6's min(0.5 rtt, 1.5 rtt_min); inf: none
    mi_min_rtts: Any = float("inf")


@dataclass(frozen=True)
class AgentSlot:
    """A controller whose flow 0 is driven from outside (the agent sets ``state[0]``, its rate)
    and whose other flows run a classic ``cross`` controller. It is how the environment reuses
    the simulator unchanged: to the simulator the agent is one more controller."""

    cross: Controller | None = None
    name: str = "agent"

    def init(self, params: SlotParams, base_rtt_s: jnp.ndarray) -> tuple[Any, Decision]:
        F = base_rtt_s.shape[0]
        rate = jnp.full(F, params.init_rate, jnp.float32)
        mi = jnp.full(F, params.first_mi_s, jnp.float32)
        dec = Decision(rate=rate, cwnd=jnp.full(F, jnp.inf, jnp.float32), mi_s=mi,
                       mi_round=jnp.zeros(F, bool))
        if self.cross is None:
            return (rate, ()), dec
        cstate, cdec = self.cross.init(params.cross, base_rtt_s)
        return (rate, cstate), self._merge(dec, cdec)

    @staticmethod
    def _merge(agent: Decision, cross: Decision) -> Decision:
        first = jnp.arange(agent.rate.shape[0]) == 0
        return jax.tree.map(lambda a, c: jnp.where(first, a, c), agent, cross)

    def on_interval(self, state: Any, stats: MIStats, params: SlotParams):
        rate, cstate = state
        mi = params.mi_rtts * stats.rtt_mean
        # AUTO Eq. 6: MI = min(0.5 rtt_{t-1}, 1.5 rtt_min); an infinite cap (Aurora, MOCC)
        # leaves the MI alone, as does a sender that has no RTT sample yet
        cap = params.mi_min_rtts * stats.min_rtt
        mi = jnp.where(jnp.isfinite(cap) & (cap > 0), jnp.minimum(mi, cap), mi)
        dec = Decision(rate=rate, cwnd=jnp.full_like(rate, jnp.inf),
                       mi_s=mi, mi_round=jnp.zeros(rate.shape, bool))
        if self.cross is None:
            return state, dec
        cstate, cdec = self.cross.on_interval(cstate, stats, params.cross)
        return (rate, cstate), self._merge(dec, cdec)


class EnvParams(struct.PyTreeNode):
    """Dynamic parameters: a sweep or a batch of preferences is a ``vmap`` over them."""

    links: LinkParams  # pool of links (leading axis P); each episode draws one uniformly
    pref: jnp.ndarray  # (K,) preference on the simplex, K objectives (MOCC: w_thr, w_lat, w_loss)
    alpha: jnp.ndarray  # action scale (MOCC Table 2: 0.025)
    init_lo: jnp.ndarray  # initial rate drawn from U(init_lo, init_hi) x capacity (Aurora)
    init_hi: jnp.ndarray
    min_rate: jnp.ndarray  # bytes/s, rate bounds (Aurora clamps to [40, 1000] packets/s)
    max_rate: jnp.ndarray
    mi_rtts: jnp.ndarray  # MI = mi_rtts x mean RTT of the previous MI (Aurora: 0.5)
    cross: Any = ()  # cross-traffic controller params, () without cross traffic
    link_index: Any = -1  # >= 0: every episode uses this link of the pool (fixed evaluation sets)
    #: MI cap in minimum RTTs (AUTO Eq. 6: 1.5); inf for Aurora's and MOCC's uncapped MI
    mi_min_rtts: Any = float("inf")
    #: true: every episode draws its preference uniformly from the simplex at reset and keeps it
    #: (AUTO §3.3: one omega per episode); false: ``pref`` is the preference
    pref_draw: Any = False


class EnvState(struct.PyTreeNode):
    sim: SimState
    link: LinkParams  # the link of this episode
    rate: jnp.ndarray  # () agent's sending rate, bytes/s
    hist: jnp.ndarray  # (history, 3) features of the last MIs, oldest first
    min_lat: jnp.ndarray  # () smallest per-MI mean RTT so far (latency ratio's denominator)
    step: jnp.ndarray  # () int32 MIs completed in this episode
    ret: jnp.ndarray  # () scalar reward summed over this episode
    obj_sum: jnp.ndarray  # (K,) objectives summed over this episode
    pref: jnp.ndarray  # (K,) the episode's preference when ``params.pref_draw`` (else unused)
    act_feat: jnp.ndarray  # () the last action as a feature (``envs.actions.action_feature``)
    mid: jnp.ndarray  # bool: the agent's MI is still running (a tick budget cut the step short)
    mi_n0: jnp.ndarray  # () int32 MIs completed when the running MI began
    mi_t0: jnp.ndarray  # () int32 tick at which the running MI began


class StepInfo(struct.PyTreeNode):
    """What one step measured, for logs and evaluation (no string-keyed dicts)."""

    objectives: jnp.ndarray  # (K,) vector reward O_t
    utilization: jnp.ndarray  # throughput / capacity over the MI
    latency_ratio: jnp.ndarray  # mean RTT / base RTT over the MI
    loss_rate: jnp.ndarray
    rate: jnp.ndarray  # bytes/s after the action
    mi_s: jnp.ndarray  # length of the MI just simulated
    truncated: jnp.ndarray  # bool: the MI hit ``max_mi_ticks`` without ending
    episode_return: jnp.ndarray  # scalar return of the episode that just ended (else 0)
    episode_objectives: jnp.ndarray  # (K,) mean objectives of the ended episode (else 0)
    episode_done: jnp.ndarray  # bool
    valid: jnp.ndarray  # bool: an MI ended (false: a tick budget ran out first, see VecEnv)
    #: the episode ended in a terminal state (never here: episodes end only at their time
    #: limit, which is a truncation, so learners bootstrap from ``next_obs`` there)
    terminated: Any = False
    #: observation and critic input after this step, before any auto-reset: what a learner
    #: bootstraps from (the drivers move them into ``Trajectory``)
    next_obs: Any = ()
    next_critic: Any = ()
    #: the critic input of the observation the step returns (after an auto-reset: the new
    #: episode's); ``VecEnv`` fills it so the drivers need not compute it again
    critic: Any = ()


@dataclass(frozen=True)
class SingleFlowEnv:
    """Static configuration: what changes shapes or code paths (DESIGN principle 2)."""

    sim: SimConfig
    history: int = 10  # MOCC Table 2: eta = 10 MIs
    episode_len: int = 400  # Aurora's MAX_STEPS
    use_pref: bool = True  # False: Aurora's observation, without the preference
    reward: RewardFn = mocc_reward
    cross: Controller | None = None
    max_mi_ticks: int = 60_000  # guard: an MI longer than this ends the step (``truncated``)
    log_ratios: bool = False  # observe log(sending ratio), log(latency ratio) (features.encode)
    critic_features: bool = False  # N_CRITIC facts for the critic only (module docstring)
    features: str = "mocc"  # the per-MI features (envs.features.FEATURE_SETS: mocc, auto)
    action_map: str = "mocc"  # how an action sets the rate (envs.actions.ACTION_MAPS)
    objectives: tuple[str, ...] = OBJECTIVES["mocc"]  # names of the reward's objectives

    @property
    def feature_set(self) -> FeatureSet:
        return FEATURE_SETS[self.features]

    @property
    def n_objectives(self) -> int:
        return len(self.objectives)

    @property
    def pref_dim(self) -> int:
        return self.n_objectives if self.use_pref else 0

    @property
    def actor_obs_dim(self) -> int:
        """The policy's input: the preference and the feature history."""
        return state_dim(self.pref_dim, self.history, self.feature_set.n)

    @property
    def obs_dim(self) -> int:
        return self.actor_obs_dim

    @property
    def critic_dim(self) -> int:
        return N_CRITIC if self.critic_features else 0

    @property
    def action_space(self) -> ActionSpace:
        kind, n = ACTION_MAPS[self.action_map]
        return ActionSpace(kind, n)

    @property
    def action_dim(self) -> int:
        return self.action_space.n

    @property
    def spec(self) -> EnvSpec:
        return EnvSpec(obs_dim=self.obs_dim, critic_dim=self.critic_dim,
                       action=self.action_space, n_objectives=self.n_objectives,
                       pref_dim=self.pref_dim, objective_names=tuple(self.objectives))

    def _slot(self) -> AgentSlot:
        return AgentSlot(self.cross)

    @staticmethod
    def preference(st: EnvState, params: EnvParams) -> jnp.ndarray:
        """The preference in force: the episode's own draw, or ``params.pref``."""
        return jnp.where(params.pref_draw, st.pref, params.pref).astype(jnp.float32)

    def _obs(self, hist: jnp.ndarray, params: EnvParams, st: EnvState) -> jnp.ndarray:
        flat = encode(hist, self.log_ratios).reshape(-1)
        if not self.use_pref:
            return flat
        return jnp.concatenate([self.preference(st, params), flat])

    def critic_obs(self, st: EnvState, params: EnvParams) -> jnp.ndarray:
        """(critic_dim,) the critic-only input for state ``st``: the link facts with
        ``critic_features``, else empty."""
        del params
        if not self.critic_features:
            return jnp.zeros((0,), jnp.float32)
        return self._critic_facts(st)

    def _critic_facts(self, st: EnvState) -> jnp.ndarray:
        """(N_CRITIC,) what the simulator knows and MOCC's state does not, scaled to O(1)."""
        cap = capacity.mean_rate_jnp(st.link.sched) / self.sim.tick_s
        base = st.link.rtt_ticks[0].astype(jnp.float32) * self.sim.tick_s
        last = st.sim.last  # the agent is flow 0
        floor = data_rtt_floor_s(st.link, self.sim)[0]  # what latency ratios divide by
        rtt = jnp.where(last.rtt_samples[0] > 0, last.rtt_mean[0], floor)
        return jnp.stack([
            jnp.clip(jnp.log(st.rate / jnp.maximum(cap, 1e-9)), -5.0, 3.0),
            10.0 * jnp.asarray(st.link.loss, jnp.float32),
            jnp.log(base / 0.05),
            jnp.minimum(PACKET_BYTES / jnp.maximum(cap, 1e-9) / base, 5.0),
            jnp.clip(jnp.log(jnp.maximum(rtt / floor, 1.0)), 0.0, 5.0),
            1.0 - st.step.astype(jnp.float32) / self.episode_len,
        ]).astype(jnp.float32)

    def reset(self, key: jnp.ndarray, params: EnvParams) -> tuple[jnp.ndarray, EnvState]:
        k_link, k_rate, k_sim = jax.random.split(key, 3)
        # the preference draw gets its own stream, so the link and rate draws are those of
        # an environment without one
        k_pref = jax.random.fold_in(key, 7)
        n = jax.tree.leaves(params.links)[0].shape[0]
        i = jnp.where(jnp.asarray(params.link_index) >= 0, params.link_index,
                      jax.random.randint(k_link, (), 0, n))
        link = jax.tree.map(lambda x: x[i], params.links)
        cap = capacity.mean_rate_jnp(link.sched) / self.sim.tick_s
        u = jax.random.uniform(k_rate, (), minval=params.init_lo, maxval=params.init_hi)
        rate = jnp.clip(u * cap, params.min_rate, params.max_rate)
        # Aurora's first MI: 1.5 x the sender's first RTT estimate, the least RTT a data packet
        # sees (as ``PolicyController.init`` gets it from ``init_state``)
        floor = data_rtt_floor_s(link, self.sim)[0]
        sp = SlotParams(init_rate=rate, mi_rtts=params.mi_rtts, first_mi_s=1.5 * floor,
                        cross=params.cross, mi_min_rtts=params.mi_min_rtts)
        sim = init_state(self.sim, link, self._slot(), sp, k_sim)
        hist = self.feature_set.empty_history(self.history)
        K = self.n_objectives
        pref = jax.random.dirichlet(k_pref, jnp.ones(K, jnp.float32)).astype(jnp.float32)
        st = EnvState(sim=sim, link=link, rate=rate, hist=hist,
                      min_lat=jnp.asarray(jnp.inf, jnp.float32), step=jnp.zeros((), jnp.int32),
                      ret=jnp.zeros((), jnp.float32), obj_sum=jnp.zeros(K, jnp.float32),
                      pref=pref, act_feat=jnp.zeros((), jnp.float32),
                      mid=jnp.zeros((), bool), mi_n0=jnp.zeros((), jnp.int32),
                      mi_t0=jnp.zeros((), jnp.int32))
        return self._obs(hist, params, st), st

    def begin(self, st: EnvState, action: jnp.ndarray, params: EnvParams) -> EnvState:
        """Start the agent's next MI: apply the action (``action_map``: MOCC Eq. 1, AUTO Eq. 7)
        to its rate, in the simulator too. While an MI is still running (``st.mid``) the
        action is ignored."""
        new = self._apply(st, action, params)
        new = new.replace(mid=jnp.ones((), bool), mi_n0=st.sim.mi_count[0], mi_t0=st.sim.t)
        return jax.tree.map(lambda o, n: jnp.where(st.mid, o, n), st, new)

    def _apply(self, st: EnvState, action: jnp.ndarray, params: EnvParams) -> EnvState:
        a = jnp.reshape(action, ())
        rate = apply_action(self.action_map, st.rate, a, params.alpha, params.min_rate,
                            params.max_rate, jnp)
        sim = st.sim
        rates, cstate = sim.cc
        sim = sim.replace(cc=(rates.at[0].set(rate), cstate),
                          decision=sim.decision._replace(rate=sim.decision.rate.at[0].set(rate)))
        return st.replace(sim=sim, rate=rate,
                          act_feat=action_feature(self.action_map, a, jnp).astype(jnp.float32))

    def slot_params(self, st: EnvState, params: EnvParams) -> SlotParams:
        return SlotParams(init_rate=st.rate, mi_rtts=params.mi_rtts,
                          first_mi_s=jnp.float32(0.0), cross=params.cross,
                          mi_min_rtts=params.mi_min_rtts)

    def sim_tick(self, st: EnvState, params: EnvParams, live: jnp.ndarray | None = None
                 ) -> SimState:
        return tick(self.sim, self._slot(), st.link, self.slot_params(st, params), st.sim,
                    live=live)

    def mi_running(self, st: EnvState, sim: SimState) -> jnp.ndarray:
        """True while the agent's MI that ``begin`` started goes on in ``sim``."""
        return (sim.mi_count[0] == st.mi_n0) & (sim.t - st.mi_t0 < self.max_mi_ticks)

    def end(self, st: EnvState, sim: SimState, params: EnvParams
            ) -> tuple[jnp.ndarray, EnvState, jnp.ndarray, jnp.ndarray, StepInfo]:
        """Observation, reward and info of the MI that ended in ``sim``; if it is still running
        (a tick budget ran out), the previous observation, reward 0 and ``valid`` false."""
        running = self.mi_running(st, sim)
        obs, new, reward, done, info = self._end(st, sim, params)
        pick = lambda o, n: jnp.where(running, o, n)  # noqa: E731
        wait = st.replace(sim=sim)
        new = jax.tree.map(pick, wait, new.replace(mid=jnp.zeros((), bool)))
        obs = pick(self._obs(st.hist, params, st), obs)
        info = jax.tree.map(lambda x: jnp.where(running, jnp.zeros_like(x), x), info)
        info = info.replace(valid=~running, rate=st.rate, next_obs=obs,
                            next_critic=self.critic_obs(new, params))
        return obs, new, jnp.where(running, 0.0, reward), done & ~running, info

    def _end(self, st: EnvState, sim: SimState, params: EnvParams
             ) -> tuple[jnp.ndarray, EnvState, jnp.ndarray, jnp.ndarray, StepInfo]:
        n0, t0 = st.mi_n0, st.mi_t0
        truncated = sim.mi_count[0] == n0
        stats = jax.tree.map(lambda x: x[0], sim.last)
        feat, min_lat = self.feature_set.compute(stats, st.min_lat, st.act_feat)
        t1 = sim.t.astype(jnp.float32)
        dur_ticks = (sim.t - t0).astype(jnp.float32)
        cap = (capacity.cum(st.link.sched, t1) - capacity.cum(st.link.sched, t1 - dur_ticks)) / (
            jnp.maximum(dur_ticks, 1.0) * self.sim.tick_s)
        out = MIOutcome(duration_s=stats.duration_s, throughput=stats.delivery_rate,
                        send_rate=stats.send_rate, capacity=cap, rtt_mean=stats.rtt_mean,
                        base_rtt=stats.base_rtt, loss_rate=stats.loss_rate,
                        got_feedback=(stats.acked_bytes + stats.lost_bytes) > 0)
        reward, obj = self.reward(out, self.preference(st, params))
        hist = push(st.hist, feat)
        step = st.step + 1
        done = step >= self.episode_len
        ret = st.ret + reward
        obj_sum = st.obj_sum + obj
        info = StepInfo(
            objectives=obj, utilization=out.throughput / jnp.maximum(cap, 1e-9),
            latency_ratio=out.rtt_mean / jnp.maximum(out.base_rtt, 1e-9),
            loss_rate=out.loss_rate, rate=st.rate, mi_s=stats.duration_s, truncated=truncated,
            episode_return=jnp.where(done, ret, 0.0),
            episode_objectives=jnp.where(done, obj_sum / step, 0.0), episode_done=done,
            valid=jnp.ones((), bool), terminated=jnp.zeros((), bool))
        st = st.replace(sim=sim, hist=hist, min_lat=min_lat, step=step, ret=ret,
                        obj_sum=obj_sum)
        return self._obs(hist, params, st), st, reward, done, info

    def step_env(self, key: jnp.ndarray, st: EnvState, action: jnp.ndarray, params: EnvParams
                 ) -> tuple[jnp.ndarray, EnvState, jnp.ndarray, jnp.ndarray, StepInfo]:
        """One MI of the agent, without auto-reset."""
        del key  # the simulator carries its own key (packet-model draws)
        st = self.begin(st, action, params)
        sim = jax.lax.while_loop(lambda s: self.mi_running(st, s),
                                 lambda s: self.sim_tick(st.replace(sim=s), params), st.sim)
        return self.end(st, sim, params)

    def step(self, key: jnp.ndarray, st: EnvState, action: jnp.ndarray, params: EnvParams
             ) -> tuple[jnp.ndarray, EnvState, jnp.ndarray, jnp.ndarray, StepInfo]:
        """``step_env`` with gymnax's auto-reset: at ``done`` a fresh episode begins."""
        k_step, k_reset = jax.random.split(key)
        obs, st, reward, done, info = self.step_env(k_step, st, action, params)
        obs_r, st_r = self.reset(k_reset, params)
        st = jax.tree.map(lambda r, s: jnp.where(done, r, s), st_r, st)
        obs = jnp.where(done, obs_r, obs)
        return obs, st, reward, done, info
