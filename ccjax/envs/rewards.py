"""Rewards of the learned controllers, as pluggable pure functions.

A reward function takes the agent flow's ``MIOutcome`` (what happened during one MI, with the
link's true capacity and base RTT, known in simulation) and the preference ``w`` and returns
``(scalar, objectives)``. ``objectives`` is the vector reward (MOCC's O_t); single-objective
rewards return their scalar as a 1-vector so every reward has the same signature and AUTO's,
Pareto's and the others' slot in by name.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
from flax import struct

from ccjax.errors import ConfigError
from ccjax.units import PACKET_BYTES


class MIOutcome(struct.PyTreeNode):
    """One MI of the agent's flow, in SI units."""

    duration_s: jnp.ndarray
    throughput: jnp.ndarray  # bytes/s acknowledged during the MI
    send_rate: jnp.ndarray  # bytes/s sent during the MI
    capacity: jnp.ndarray  # bytes/s the link offered during the MI (mean)
    rtt_mean: jnp.ndarray  # s, mean RTT of the MI's ACKs (smoothed RTT if none)
    base_rtt: jnp.ndarray  # s, the least RTT a data packet sees (propagation + transmission)
    loss_rate: jnp.ndarray  # lost / (acked + lost) learned this MI
    got_feedback: jnp.ndarray  # bool: any ACK or loss notice arrived


RewardFn = Callable[[MIOutcome, jnp.ndarray], tuple[jnp.ndarray, jnp.ndarray]]


def mocc_objectives(o: MIOutcome) -> jnp.ndarray:
    """MOCC Eq. 2's three objectives, each in [0, 1]:

    * O_thr  = measured throughput / link capacity (clipped at 1: a burst of ACKs for data queued
      earlier can exceed capacity within one MI; the paper normalises to [0, 1]);
    * O_lat  = base link latency / measured latency (both round-trip here);
    * O_loss = 1 - lost / (acked + lost), Aurora's loss ratio over resolved packets.
    """
    thr = jnp.clip(o.throughput / jnp.maximum(o.capacity, 1e-9), 0.0, 1.0)
    lat = jnp.clip(o.base_rtt / jnp.maximum(o.rtt_mean, 1e-9), 0.0, 1.0)
    loss = 1.0 - jnp.clip(o.loss_rate, 0.0, 1.0)
    return jnp.stack([thr, lat, loss], -1)


def mocc_reward(o: MIOutcome, w: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """r_t = w^T O_t (MOCC Eq. 2), in [0, 1] per MI."""
    obj = mocc_objectives(o)
    return jnp.sum(w * obj, -1), obj


def aurora_reward(o: MIOutcome, w: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Aurora's reward (PCC-RL ``network_sim.py``): 10 x throughput (packets/s) - 1000 x latency
    (s) - 2000 x loss rate, scaled by 0.001 as its training code does. ``w`` is ignored (Aurora
    has no preference); the objectives vector is MOCC's, for comparable logs."""
    r = (10.0 * o.throughput / PACKET_BYTES - 1000.0 * o.rtt_mean - 2000.0 * o.loss_rate) * 1e-3
    return r, mocc_objectives(o)


def auto_objectives(o: MIOutcome) -> jnp.ndarray:
    """AUTO Eq. 5's two objectives, [throughput, -RTT], made scale-free (the paper gives no
    units, notes §1; its links span 1-42 Mbps and 50-800 ms, so raw Mbps and ms would let the
    fastest and longest links dominate every update):

    * O_thr   = throughput / link capacity, clipped at 1 (as MOCC's O_thr), in [0, 1];
    * O_delay = base RTT / measured RTT - 1, in [-1, 0]: 0 with an empty queue, falling as
      queueing delay grows; monotone in -RTT for a given link, as Eq. 5's -rtt is.
    """
    thr = jnp.clip(o.throughput / jnp.maximum(o.capacity, 1e-9), 0.0, 1.0)
    lat = jnp.clip(o.base_rtt / jnp.maximum(o.rtt_mean, 1e-9), 0.0, 1.0) - 1.0
    return jnp.stack([thr, lat], -1)


def auto_reward(o: MIOutcome, w: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """AUTO Eq. 1: r = w^T R with R = ``auto_objectives`` and w = (w_t, 1 - w_t)."""
    obj = auto_objectives(o)
    return jnp.sum(w * obj, -1), obj


REWARDS: dict[str, RewardFn] = {"mocc": mocc_reward, "aurora": aurora_reward,
                                "auto": auto_reward}
#: each reward's objectives, by short name (their count is the preference's length)
OBJECTIVES: dict[str, tuple[str, ...]] = {"mocc": ("thr", "lat", "loss"),
                                          "aurora": ("thr", "lat", "loss"),
                                          "auto": ("thr", "delay")}


def objective_names(reward: str) -> tuple[str, ...]:
    """The objectives of the reward named ``reward``; one registered in ``REWARDS`` without an
    ``OBJECTIVES`` entry returns MOCC's three (the convention every reward here follows)."""
    return OBJECTIVES.get(reward, OBJECTIVES["mocc"])


def get_reward(name: str) -> RewardFn:
    try:
        return REWARDS[name]
    except KeyError:
        raise ConfigError(
            f"reward={name!r} is invalid: known rewards are {', '.join(sorted(REWARDS))}"
        ) from None
