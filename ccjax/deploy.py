"""Run a trained MOCC (or Aurora) policy in a real datapath, with NumPy alone.

This file imports nothing from JAX, flax or the rest of ccjax: copy it next to a datapath and
``load`` a policy directory written by ``ccjax.agents.export.save_policy`` (``policy.npz`` with
the actor's weights, ``policy.json`` with format ``ccjax-policy/1``).

The contract is MOCC's deployment library (MOCC §6: ``Register(w)``, ``ReportStatus(s_t)``,
``GetSendingRate()``), datapath-agnostic::

    policy = deploy.load("runs/mocc/policy")
    cc = deploy.MOCC(policy, init_rate=125_000.0)     # bytes/s before the first decision
    cc.register([0.6, 0.3, 0.1])                       # w = (w_thr, w_lat, w_loss)
    rate = cc.get_sending_rate()                       # pace the first MI at this rate
    mi = cc.first_interval_s(base_rtt)                 # Aurora: 3 x one-way latency
    # at the end of every MI, with that MI's measurements:
    rate = cc.report_status(dict(send_rate=..., delivery_rate=..., rtt_mean=...,
                                 rtt_first_half=..., rtt_second_half=..., duration_s=...,
                                 rtt_samples=...))
    mi = cc.next_interval_s(rtt_mean)                  # Aurora: 0.5 x the MI's mean RTT

* **UDT** (user space, as MOCC, Aurora and PCC were evaluated): the congestion-control shim
  keeps one ``MOCC`` per connection, accumulates the MI's sent bytes, ACKed bytes and RTT
  samples (mean, and the means of the MI's first and second halves), calls ``report_status``
  when the MI ends and sets the pacing rate (``m_dPktSndPeriod`` = packet size / rate) from its
  return value; the next MI lasts ``next_interval_s(rtt_mean)``.
* **CCP** (kernel datapath, MOCC §6's evaluation): the datapath program reports the same per-MI
  measurements to the user-space agent every ``next_interval_s`` seconds; the agent calls
  ``report_status`` and sends back the rate (``Rate`` in the datapath program).

``report_status`` computes exactly the features of the training environment
(``ccjax.envs.features``, Aurora's defaults that MOCC uses unchanged, MOCC §3.1): sending ratio
(1 when nothing was delivered or the ratio reaches 1000), latency ratio against the running
minimum of per-MI mean RTTs, and latency gradient (second-half minus first-half mean RTT over
the MI's length). They enter a history of the last ``history`` MIs, initially filled with
Aurora's empty MI (1, 1, 0); the observation is the preference followed by that history, oldest
first, with the two ratios as natural logs (floored at 1e-3) when the policy's ``log_ratios`` is
true, as ``ccjax.envs.features.encode`` feeds them in training. The actor's mean action a (no
exploration) sets the rate by MOCC Eq. 1: rate x (1 + alpha a) if a >= 0 else
rate / (1 - alpha a), clipped to the policy's [min_rate, max_rate].

As in training, the policy decides once before any MI was measured (on the empty history): the
first ``get_sending_rate`` (or ``report_status``) takes that decision, so call ``register``
first. All rates are bytes/s, all times seconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "ccjax-policy/1"
PARAMS_FILE = "policy.npz"
META_FILE = "policy.json"
#: an empty history slot: what Aurora's sender reports for an MI without data
EMPTY = (1.0, 1.0, 0.0)
N_FEATURES = 3
#: floor of a ratio before its log (``ccjax.envs.features.LOG_FLOOR``)
LOG_FLOOR = 1e-3
#: the per-MI measurements ``report_status`` reads (the RTT ones only when rtt_samples > 0)
STATS_FIELDS = ("send_rate", "delivery_rate", "rtt_mean", "rtt_first_half", "rtt_second_half",
                "duration_s", "rtt_samples")


class PolicyError(ValueError):
    """A policy directory whose contents do not form a valid ``ccjax-policy/1`` policy."""


class Policy:
    """The actor of PPO-MOCC or Aurora as a NumPy forward pass, identical to
    ``ccjax.agents.networks.GaussianActor``: [tanh(Dense_pn(w)), history] -> tanh Dense layers
    -> linear mean (MOCC §3.2: two hidden layers of 64 and 32 tanh units plus the PN)."""

    def __init__(self, weights: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        self.meta = dict(meta)
        self.algo: str = meta["algo"]
        self.hidden: list[int] = [int(h) for h in meta["hidden"]]
        self.pn_width = int(meta["pn_width"])
        self.pref_dim = int(meta["pref_dim"])
        self.history = int(meta["history"])
        self.alpha = float(meta["alpha"])
        self.mi_rtts = float(meta["mi_rtts"])
        self.min_rate = float(meta["min_rate"])
        self.max_rate = float(meta["max_rate"])
        log_ratios = meta.get("log_ratios", False)  # absent in files that predate the field
        if not isinstance(log_ratios, bool):
            raise PolicyError(f"policy log_ratios={log_ratios!r} is invalid: true or false")
        self.log_ratios: bool = log_ratios
        pref = meta.get("preference")
        self.preference: tuple[float, ...] | None = (
            None if pref is None else check_preference(pref))
        _check_weights(weights, self.pref_dim, self.pn_width, self.hidden, self.history)
        w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
        self._pn = (w["trunk/pn/kernel"], w["trunk/pn/bias"]) if self.pref_dim else None
        self._layers = [(w[f"trunk/h{i}/kernel"], w[f"trunk/h{i}/bias"])
                        for i in range(len(self.hidden))]
        self._head = (w["mean/kernel"], w["mean/bias"])

    @property
    def obs_dim(self) -> int:
        return self.pref_dim + N_FEATURES * self.history

    def mean(self, obs: np.ndarray) -> np.ndarray:
        """Mean action(s), shape (..., 1), for observation(s) of shape (..., obs_dim)."""
        x = np.asarray(obs, np.float64)
        if x.shape[-1:] != (self.obs_dim,):
            raise ValueError(f"obs has shape {x.shape}: the last axis must be obs_dim="
                             f"{self.obs_dim} ({self.pref_dim} preference + "
                             f"{N_FEATURES} x {self.history} history)")
        if self._pn is not None:
            k, b = self._pn
            w, hist = x[..., : self.pref_dim], x[..., self.pref_dim:]
            x = np.concatenate([np.tanh(w @ k + b), hist], -1)
        for k, b in self._layers:
            x = np.tanh(x @ k + b)
        k, b = self._head
        return x @ k + b

    def act(self, obs: np.ndarray) -> float:
        """The deterministic action (the Gaussian's mean) for one observation."""
        return float(self.mean(np.asarray(obs, np.float64).reshape(-1))[0])


def load(path: str | Path) -> Policy:
    """Read ``policy.npz`` and ``policy.json`` from the directory ``path``, or of the model
    shipped with ccjax under that name (``mocc``: ``ccjax models``) where no such directory
    exists. Raises ``FileNotFoundError`` for a missing file and ``PolicyError`` for invalid
    contents."""
    d = Path(path)
    shipped = Path(__file__).resolve().parent / "models" / str(path)
    named = str(path).replace("-", "_").isidentifier()
    if not d.exists() and named and (shipped / META_FILE).is_file():
        d = shipped  # a shipped model's name (a copy of this file alone has none)
    for name in (META_FILE, PARAMS_FILE):
        if not (d / name).is_file():
            raise FileNotFoundError(f"policy {str(d)!r}: {name} is missing (write it with "
                                    "ccjax.agents.export.save_policy)")
    try:
        meta = json.loads((d / META_FILE).read_text())
    except ValueError as e:
        raise PolicyError(f"policy {str(d)!r}: {META_FILE} is not valid JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise PolicyError(f"policy {str(d)!r}: format {got!r} is not {FORMAT!r}")
    for name in ("algo", "hidden", "pn_width", "pref_dim", "history", "alpha", "mi_rtts",
                 "min_rate", "max_rate", "activation"):
        if name not in meta:
            raise PolicyError(f"policy {str(d)!r}: {META_FILE} lacks the field {name!r}")
    if meta["activation"] != "tanh":
        raise PolicyError(f"policy {str(d)!r}: activation {meta['activation']!r} is not 'tanh'")
    if not 0 < float(meta["min_rate"]) < float(meta["max_rate"]):
        raise PolicyError(f"policy {str(d)!r}: rate bounds [{meta['min_rate']}, "
                          f"{meta['max_rate']}] are not 0 < min_rate < max_rate")
    try:
        with np.load(d / PARAMS_FILE, allow_pickle=False) as z:
            weights = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise PolicyError(f"policy {str(d)!r}: {PARAMS_FILE} is not readable ({e})") from None
    return Policy(weights, meta)


def _check_weights(weights: Mapping[str, np.ndarray], pref_dim: int, pn_width: int,
                   hidden: Sequence[int], history: int) -> None:
    want: dict[str, tuple[int, ...]] = {}
    if pref_dim:
        want["trunk/pn/kernel"] = (pref_dim, pn_width)
        want["trunk/pn/bias"] = (pn_width,)
        n_in = pn_width + N_FEATURES * history
    else:
        n_in = N_FEATURES * history
    for i, h in enumerate(hidden):
        want[f"trunk/h{i}/kernel"] = (n_in, h)
        want[f"trunk/h{i}/bias"] = (h,)
        n_in = h
    want.update({"mean/kernel": (n_in, 1), "mean/bias": (1,), "log_std": (1,)})
    if set(weights) != set(want):
        raise PolicyError(f"policy weights {sorted(weights)} do not match the network "
                          f"{sorted(want)} (missing {sorted(set(want) - set(weights))}, "
                          f"extra {sorted(set(weights) - set(want))})")
    for k, shape in want.items():
        if tuple(np.shape(weights[k])) != shape:
            raise PolicyError(f"policy weight {k} has shape {tuple(np.shape(weights[k]))}, "
                              f"expected {shape}")


def check_preference(w: Sequence[float]) -> tuple[float, float, float]:
    """A preference on the simplex: three finite weights >= 0 summing to 1 (within 1e-6), the
    rule the training environment enforces (``ccjax.envs.build.check_preference``)."""
    try:
        v = [float(x) for x in w]
    except (TypeError, ValueError):
        raise ValueError(f"preference {w!r} is invalid: three numbers w_thr, w_lat, w_loss"
                         ) from None
    if len(v) != 3:
        raise ValueError(f"preference {v} is invalid: three weights w_thr, w_lat, w_loss")
    if not all(math.isfinite(x) and x >= 0 for x in v):
        raise ValueError(f"preference {v} is invalid: weights must be >= 0")
    if abs(sum(v) - 1.0) > 1e-6:
        raise ValueError(f"preference {v} is invalid: weights must sum to 1 (sum {sum(v):g})")
    return v[0], v[1], v[2]


def _field(stats: Any, name: str) -> float:
    try:
        v = stats[name] if isinstance(stats, Mapping) else getattr(stats, name)
    except (KeyError, AttributeError):
        raise ValueError(f"stats lacks {name!r}; report_status needs "
                         f"{', '.join(STATS_FIELDS)}") from None
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"stats {name}={v} is invalid: a finite number")
    return v


class MOCC:
    """One connection's rate controller (MOCC §6's library): ``register(w)``,
    ``report_status(stats)`` once per MI, ``get_sending_rate()``. See the module docstring."""

    def __init__(self, policy: Policy, init_rate: float,
                 preference: Sequence[float] | None = None) -> None:
        """``init_rate`` (bytes/s) is the rate the policy's first decision scales (the training
        environment draws it from U(0.3, 1.5) x the link's capacity, as Aurora does);
        ``preference`` defaults to the one saved with the policy."""
        r = float(init_rate)
        if not (math.isfinite(r) and r > 0):
            raise ValueError(f"init_rate={init_rate!r} is invalid: a rate > 0 bytes/s")
        self.policy = policy
        self._rate = min(max(r, policy.min_rate), policy.max_rate)
        self._pref: tuple[float, ...] | None = None
        if preference is not None:
            self.register(preference)
        elif policy.pref_dim:
            self._pref = policy.preference
        self._hist = np.tile(np.asarray(EMPTY, np.float64), (policy.history, 1))
        self._min_lat = math.inf  # running minimum of per-MI mean RTT (latency ratio)
        self._started = False

    def register(self, w: Sequence[float]) -> None:
        """Set the application's preference w = (w_thr, w_lat, w_loss) on the simplex; it takes
        effect at the next decision. Aurora policies (pref_dim 0) take none."""
        v = check_preference(w)
        if not self.policy.pref_dim:
            raise ValueError(f"preference {list(v)} is invalid: this {self.policy.algo!r} "
                             "policy has no preference input (pref_dim=0)")
        self._pref = v

    @property
    def preference(self) -> tuple[float, ...] | None:
        return self._pref

    def observation(self) -> np.ndarray:
        """What the policy sees now: the preference, then the feature history (oldest first;
        the ratios as logs for a ``log_ratios`` policy)."""
        hist = self._hist
        if self.policy.log_ratios:
            hist = hist.copy()
            hist[:, :2] = np.log(np.maximum(hist[:, :2], LOG_FLOOR))
        flat = hist.reshape(-1)
        if not self.policy.pref_dim:
            return flat.copy()
        if self._pref is None:
            raise RuntimeError("no preference: call register(w) before the first decision")
        return np.concatenate([np.asarray(self._pref, np.float64), flat])

    def _features(self, stats: Any) -> tuple[np.ndarray, float]:
        """(the MI's features, updated running minimum of per-MI mean RTT), exactly as
        ``ccjax.envs.features.mi_features`` computes them (Aurora's sender_obs.py defaults)."""
        send = _field(stats, "send_rate")
        thr = _field(stats, "delivery_rate")
        dur = _field(stats, "duration_s")
        got = _field(stats, "rtt_samples") > 0
        # Aurora's guard: no delivery, or a ratio of 1000 or more, reads as 1 (a stalled path).
        send_ratio = send / max(thr, 1e-30) if (thr > 0 and send < 1000.0 * thr) else 1.0
        if not got:  # no RTT sample this MI: Aurora's neutral values, the minimum unchanged
            return np.asarray([send_ratio, 1.0, 0.0], np.float64), self._min_lat
        lat = _field(stats, "rtt_mean")
        h1, h2 = _field(stats, "rtt_first_half"), _field(stats, "rtt_second_half")
        # the minimum of per-MI means, not of RTT samples (MOCC notes §7.6, Aurora)
        min_lat = min(self._min_lat, lat)
        lat_ratio = lat / max(min_lat, 1e-9)
        grad = (h2 - h1) / max(dur, 1e-9)
        return np.asarray([send_ratio, lat_ratio, grad], np.float64), min_lat

    def _decide(self) -> None:
        a = self.policy.act(self.observation())
        alpha = self.policy.alpha
        # MOCC Eq. 1: multiplicative and asymmetric, so +a then -a restores the rate.
        rate = self._rate * (1.0 + alpha * a) if a >= 0 else self._rate / (1.0 - alpha * a)
        self._rate = min(max(rate, self.policy.min_rate), self.policy.max_rate)

    def _start(self) -> None:
        if not self._started:
            self._decide()  # the environment's first step acts on the empty history
            self._started = True

    def report_status(self, stats: Any) -> float:
        """Report one finished MI (a dict or an object with ``STATS_FIELDS``: rates in bytes/s,
        times in s, ``rtt_samples`` > 0 when any ACK carried an RTT sample); returns the rate
        (bytes/s) for the next MI."""
        self._start()
        feat, self._min_lat = self._features(stats)
        self._hist = np.concatenate([self._hist[1:], feat[None]], 0)
        self._decide()
        return self._rate

    def get_sending_rate(self) -> float:
        """The rate (bytes/s) to send at until the next ``report_status``."""
        self._start()
        return self._rate

    def next_interval_s(self, rtt_mean: float) -> float:
        """Length of the next MI: ``mi_rtts`` (Aurora: 0.5) x the mean RTT of the last MI."""
        return self.policy.mi_rtts * float(rtt_mean)

    @staticmethod
    def first_interval_s(base_rtt: float) -> float:
        """Length of the first MI, before any RTT was measured in one: 3 x the one-way latency,
        1.5 x the base (handshake) RTT, as in Aurora's simulator and the training env."""
        return 1.5 * float(base_rtt)
