"""Per-MI observation features of Aurora and MOCC (MOCC §3.1, g_t = <l_t, p_t, q_t>).

Aurora's defaults (PCC-RL ``sender_obs.py``), which MOCC's paper names and uses unchanged:

* sending ratio   l_t = send rate / delivery rate of the MI; 1 when nothing was delivered or the
  ratio would exceed 1000 (Aurora's guard against a stalled path);
* latency ratio   p_t = mean RTT of the MI / the smallest per-MI mean RTT of the connection so
  far (a running minimum over MIs, not the minimum RTT sample: MOCC notes §7.6);
* latency gradient q_t = (mean RTT of the MI's second half - of its first half) / MI length
  (Aurora's "sent latency inflation").

All three are ratios, so the policy sees no absolute rate or delay and generalises across link
speeds (MOCC §6.1, the test links lie far outside the training ranges).

``encode(hist, log_ratios=True)`` is the observation option ccjax adds (off by default, the
papers' raw features): the sending and latency ratios enter the network as their natural logs.
Both are >= ~1 and unbounded (a latency ratio reaches hundreds under a 3000-packet buffer), so
raw they saturate the first tanh layer; as logs, 1 reads 0 (the empty slot becomes (0, 0, 0))
and a doubling is one fixed step wherever it happens. Measured on 36 landmarks
(``algos/ppo-mocc.toml``): with it, and the actor's log-std bounded, training no longer collapses.
"""

from __future__ import annotations

import jax.numpy as jnp

from ccjax.sim.stats import MIStats

#: the value an empty history slot holds: what Aurora's sender reports for an MI without data
EMPTY = (1.0, 1.0, 0.0)
N_FEATURES = 3


def state_dim(pref_dim: int, history: int) -> int:
    """Length of MOCC's state, the policy's input: the preference (``pref_dim`` values, 0 for
    Aurora) followed by ``history`` MIs of ``N_FEATURES`` features."""
    return pref_dim + N_FEATURES * history

#: ratios are floored here before the log (a sending ratio is 0 in an MI that sent nothing
#: while earlier packets were delivered): log(1e-3) = -6.9, far below any ratio a link gives
LOG_FLOOR = 1e-3


def mi_features(stats: MIStats, min_lat: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(features (..., 3), updated running minimum of per-MI mean latency) for one MI."""
    got = stats.rtt_samples > 0
    lat = stats.rtt_mean
    new_min = jnp.where(got, jnp.minimum(min_lat, lat), min_lat)
    thr = stats.delivery_rate
    send_ratio = jnp.where((thr > 0) & (stats.send_rate < 1000.0 * thr),
                           stats.send_rate / jnp.maximum(thr, 1e-30), 1.0)
    lat_ratio = jnp.where(got & jnp.isfinite(new_min), lat / jnp.maximum(new_min, 1e-9), 1.0)
    grad = (stats.rtt_second_half - stats.rtt_first_half) / jnp.maximum(stats.duration_s, 1e-9)
    grad = jnp.where(got, grad, 0.0)
    return jnp.stack([send_ratio, lat_ratio, grad], -1), new_min


def empty_history(history: int) -> jnp.ndarray:
    return jnp.tile(jnp.asarray(EMPTY, jnp.float32), (history, 1))


def push(hist: jnp.ndarray, feat: jnp.ndarray) -> jnp.ndarray:
    """Append the newest MI's features to a (history, 3) window, dropping the oldest."""
    return jnp.concatenate([hist[1:], feat[None]], 0)


def encode(hist: jnp.ndarray, log_ratios: bool) -> jnp.ndarray:
    """The history as the network sees it (..., history, 3): unchanged, or with the sending and
    latency ratios (columns 0 and 1) replaced by their logs (see the module docstring)."""
    if not log_ratios:
        return hist
    ratios = jnp.log(jnp.maximum(hist[..., :2], LOG_FLOOR))
    return jnp.concatenate([ratios, hist[..., 2:]], -1)
