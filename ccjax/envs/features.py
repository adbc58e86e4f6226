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

from dataclasses import dataclass

import jax.numpy as jnp

from ccjax.sim.stats import MIStats

#: the value an empty history slot holds: what Aurora's sender reports for an MI without data
EMPTY = (1.0, 1.0, 0.0)
N_FEATURES = 3


def state_dim(pref_dim: int, history: int, n_features: int = N_FEATURES) -> int:
    """Length of the policy's input: the preference (``pref_dim`` values, 0 for Aurora)
    followed by ``history`` MIs of ``n_features`` features (MOCC's 3, AUTO's 5)."""
    return pref_dim + n_features * history

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
    """Append the newest MI's features to a (history, n) window, dropping the oldest."""
    return jnp.concatenate([hist[1:], feat[None]], 0)


def encode(hist: jnp.ndarray, log_ratios: bool) -> jnp.ndarray:
    """The history as the network sees it (..., history, 3): unchanged, or with the sending and
    latency ratios (columns 0 and 1) replaced by their logs (see the module docstring)."""
    if not log_ratios:
        return hist
    ratios = jnp.log(jnp.maximum(hist[..., :2], LOG_FLOOR))
    return jnp.concatenate([ratios, hist[..., 2:]], -1)


#: AUTO's empty slot (Eq. 4's order): latency ratio 1, sending ratio 1, no loss, no gradient,
#: the previous action "keep the rate" (log2 of x1 = 0)
AUTO_EMPTY = (1.0, 1.0, 0.0, 0.0, 0.0)


def auto_features(stats: MIStats, min_lat: jnp.ndarray, action_feature: jnp.ndarray
                  ) -> tuple[jnp.ndarray, jnp.ndarray]:
    """AUTO Eq. 4 for one MI, (features (..., 5), updated running minimum of per-MI mean RTT):
    r_lat (mean latency over the least mean latency so far), r_send (sent over acked, Aurora's
    guard as in ``mi_features``), r_loss, g_lat (d latency / dt over the MI) and the previous
    action as ``action_feature`` (``ccjax.envs.actions.auto_action_feature``). The first four
    are Aurora's
    statistics, which AUTO inherits; the paper leaves their normalisation open (notes §1)."""
    base, new_min = mi_features(stats, min_lat)
    send_ratio, lat_ratio, grad = base[..., 0], base[..., 1], base[..., 2]
    act = jnp.broadcast_to(jnp.asarray(action_feature, jnp.float32), lat_ratio.shape)
    return jnp.stack([lat_ratio, send_ratio, stats.loss_rate.astype(jnp.float32), grad, act],
                     -1), new_min


@dataclass(frozen=True)
class FeatureSet:
    """One observation's per-MI features: ``n`` values, the ``empty`` slot, and whether the
    previous action is one of them. In both sets the first two columns are the ratios that
    ``encode`` may take logs of."""

    name: str
    n: int
    empty: tuple[float, ...]
    with_action: bool

    def compute(self, stats: MIStats, min_lat: jnp.ndarray, action_feature: jnp.ndarray
                ) -> tuple[jnp.ndarray, jnp.ndarray]:
        """The MI's features; ``action_feature`` is the previous action's feature value
        (``ccjax.envs.actions.action_feature``), used by sets ``with_action``."""
        if self.with_action:
            return auto_features(stats, min_lat, action_feature)
        return mi_features(stats, min_lat)

    def empty_history(self, history: int) -> jnp.ndarray:
        return jnp.tile(jnp.asarray(self.empty, jnp.float32), (history, 1))


FEATURE_SETS = {"mocc": FeatureSet("mocc", N_FEATURES, EMPTY, False),
                "auto": FeatureSet("auto", len(AUTO_EMPTY), AUTO_EMPTY, True)}
