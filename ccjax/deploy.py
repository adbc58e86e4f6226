"""Run a trained policy (MOCC, Aurora or AUTO) in a real datapath, with NumPy alone.

This file imports nothing from JAX, flax or the rest of ccjax. It needs one companion: the
action maps' one home, ``ccjax/envs/actions.py`` (plain Python, no imports), which it loads by
path: first ``actions.py`` beside this file, else ``envs/actions.py`` below it (where it lies in
the package). **A datapath copies both files** (``deploy.py`` and ``actions.py``, side by side)
and ``load``s a policy directory written by ``ccjax.agents.export.save_policy``
(``policy.npz`` with the network's weights, ``policy.json`` describing the network and the
environment it was trained in; formats ``ccjax-policy/1`` and ``ccjax-policy/2``, see
``read_meta``).

The contract is MOCC's deployment library (MOCC §6: ``Register(w)``, ``ReportStatus(s_t)``,
``GetSendingRate()``), datapath-agnostic; ``Sender`` implements it for every policy
(``MOCC`` is the same class under its old name)::

    policy = deploy.load("runs/mocc/policy")
    cc = deploy.Sender(policy, init_rate=125_000.0)   # bytes/s before the first decision
    cc.register([0.6, 0.3, 0.1])                       # w: one weight per objective
    rate = cc.get_sending_rate()                       # pace the first MI at this rate
    mi = cc.first_interval_s(base_rtt)                 # Aurora: 3 x one-way latency
    # at the end of every MI, with that MI's measurements (policy.stats_fields):
    rate = cc.report_status(dict(send_rate=..., delivery_rate=..., rtt_mean=...,
                                 rtt_first_half=..., rtt_second_half=..., duration_s=...,
                                 rtt_samples=..., loss_rate=...))   # loss_rate: AUTO only
    mi = cc.next_interval_s(rtt_mean, min_rtt)         # min_rtt: only a capped MI (AUTO) needs it

* **UDT** (user space, as MOCC, Aurora and PCC were evaluated): the congestion-control shim
  keeps one ``Sender`` per connection, accumulates the MI's sent bytes, ACKed and lost bytes and
  RTT samples (mean, and the means of the MI's first and second halves), calls
  ``report_status`` when the MI ends and sets the pacing rate (``m_dPktSndPeriod`` = packet
  size / rate) from its return value; the next MI lasts ``next_interval_s(rtt_mean, min_rtt)``.
* **CCP** (kernel datapath, MOCC §6's evaluation): the datapath program reports the same per-MI
  measurements to the user-space agent every ``next_interval_s`` seconds; the agent calls
  ``report_status`` and sends back the rate (``Rate`` in the datapath program).

``report_status`` computes exactly the features of the training environment
(``ccjax.envs.features``; the policy's ``features``):

* ``mocc`` (Aurora's defaults that MOCC uses unchanged, MOCC §3.1): sending ratio (1 when
  nothing was delivered or the ratio reaches 1000), latency ratio against the running minimum
  of per-MI mean RTTs, latency gradient (second-half minus first-half mean RTT over the MI's
  length); an empty slot is (1, 1, 0);
* ``auto`` (AUTO Eq. 4): latency ratio, sending ratio (both with Aurora's guards as above),
  loss rate (lost / (acked + lost) bytes learned in the MI, 0 without feedback), latency
  gradient, and the previous action's feature (``actions.action_feature``: log2 of AUTO's rate
  multiplier); an empty slot is (1, 1, 0, 0, 0).

They enter a history of the last ``history`` MIs, initially empty slots; the observation is the
preference (one weight per objective, when the network takes one) followed by that history,
oldest first, with the first two columns (the ratios) as natural logs (floored at 1e-3) when
the policy's ``log_ratios`` is true, as ``ccjax.envs.features.encode`` feeds them in training.
The network's deterministic action (no exploration) sets the rate through the policy's action
map (``actions.apply_action``): ``mocc``, MOCC Eq. 1 with the Gaussian's mean a; ``auto``,
AUTO Eq. 7's multiplier at the argmax of the logits; clipped to [min_rate, max_rate]. The MI
lasts ``mi_rtts`` x the last MI's mean RTT, at most ``mi_min_rtts`` x the sender's minimum RTT
when the policy caps it (AUTO Eq. 6; ``mi_min_rtts`` null: no cap).

As in training, the policy decides once before any MI was measured (on the empty history): the
first ``get_sending_rate`` (or ``report_status``) takes that decision, so call ``register``
first. All rates are bytes/s, all times seconds.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np


def _load_actions() -> ModuleType:
    """The action maps (``ccjax/envs/actions.py``), loaded by path so that importing this file
    pulls in neither JAX nor a package: ``actions.py`` beside this file (a datapath's copy of
    both), else ``envs/actions.py`` below it (this file inside the ccjax package)."""
    here = Path(__file__).resolve().parent
    for cand in (here / "actions.py", here / "envs" / "actions.py"):
        if cand.is_file():
            name = "_ccjax_deploy_actions"
            spec = importlib.util.spec_from_file_location(name, cand)
            if spec is None or spec.loader is None:  # pragma: no cover - a file that is there
                continue
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod  # dataclasses and pickling look a module up by name
            spec.loader.exec_module(mod)
            return mod
    raise ImportError(f"ccjax.deploy needs the action maps: copy ccjax/envs/actions.py next to "
                      f"{Path(__file__).name} (looked for {here / 'actions.py'} and "
                      f"{here / 'envs' / 'actions.py'})")


actions = _load_actions()

FORMAT_V1 = "ccjax-policy/1"
#: the format ``save_policy`` writes
FORMAT = "ccjax-policy/2"
#: the formats this file (and ``ccjax.agents.export.load_policy``) reads
FORMATS = (FORMAT_V1, FORMAT)
PARAMS_FILE = "policy.npz"
META_FILE = "policy.json"
#: an empty history slot of MOCC's features: what Aurora's sender reports for an MI without data
EMPTY = (1.0, 1.0, 0.0)
N_FEATURES = 3
#: AUTO's empty slot (``ccjax.envs.features.AUTO_EMPTY``)
AUTO_EMPTY = (1.0, 1.0, 0.0, 0.0, 0.0)
#: feature set -> its empty slot (the number of features is its length)
FEATURES: dict[str, tuple[float, ...]] = {"mocc": EMPTY, "auto": AUTO_EMPTY}
#: floor of a ratio before its log (``ccjax.envs.features.LOG_FLOOR``)
LOG_FLOOR = 1e-3
#: the per-MI measurements ``report_status`` reads (the RTT ones only when rtt_samples > 0)
STATS_FIELDS = ("send_rate", "delivery_rate", "rtt_mean", "rtt_first_half", "rtt_second_half",
                "duration_s", "rtt_samples")
#: ... and with AUTO's features the MI's loss rate too
AUTO_STATS_FIELDS = STATS_FIELDS + ("loss_rate",)
#: MOCC's objectives, the only ones a ``ccjax-policy/1`` file knows
MOCC_OBJECTIVES = ("thr", "lat", "loss")

_NUM = (int, float)
#: network kind -> the fields of its description and their types (exactly these)
NETWORKS: dict[str, dict[str, type | tuple[type, ...]]] = {
    # PPO's GaussianActor (MOCC, Aurora): [tanh(pn(w)), history] -> tanh layers -> linear mean
    "gaussian-mlp": {"kind": str, "activation": str, "hidden": list, "pn_width": int,
                     "pref_dim": int},
    # AUTO's PrefAfterTrunk: ReLU trunk over the history, [trunk, w] -> ReLU head -> logits
    "discrete-pref-after-trunk": {"kind": str, "activation": str, "hidden": list,
                                  "head_width": int, "pref_dim": int, "n_actions": int,
                                  "n_objectives": int},
}
#: network kind -> (its activation, the action kind it outputs: ``actions.ACTION_MAPS``)
NETWORK_KINDS: dict[str, tuple[str, str]] = {"gaussian-mlp": ("tanh", "box"),
                                             "discrete-pref-after-trunk": ("relu", "discrete")}
#: a ``ccjax-policy/1`` file's fields and their types (``preference`` may also be null)
V1_FIELDS: dict[str, type | tuple[type, ...]] = {
    "format": str, "algo": str, "hidden": list, "pn_width": int, "pref_dim": int,
    "history": int, "alpha": _NUM, "mi_rtts": _NUM, "min_rate": _NUM, "max_rate": _NUM,
    "activation": str, "preference": (list, type(None)),
}
#: a ``ccjax-policy/2`` file's fields and their types
V2_FIELDS: dict[str, type | tuple[type, ...]] = {
    "format": str, "algo": str, "network": dict, "features": str, "action_map": str,
    "objectives": list, "history": int, "alpha": _NUM, "mi_rtts": _NUM,
    "mi_min_rtts": (int, float, type(None)), "min_rate": _NUM, "max_rate": _NUM,
    "log_ratios": bool, "preference": (list, type(None)),
}


class PolicyError(ValueError):
    """A policy directory whose contents do not form a valid policy (one line, naming the
    field)."""


def _type_name(typ: type | tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", list: "a list",
             dict: "an object", bool: "true or false", type(None): "null"}
    ts = (typ,) if isinstance(typ, type) else typ
    if float in ts:  # int and float: a number
        ts = tuple(t for t in ts if t is not int)
    return " or ".join(names.get(t, t.__name__) for t in ts)


def _is(v: Any, typ: type | tuple[type, ...]) -> bool:
    ts = (typ,) if isinstance(typ, type) else typ
    if isinstance(v, bool):
        return bool in ts
    return isinstance(v, ts)


def read_meta(meta: Any, where: str = "policy") -> dict[str, Any]:
    """Validate a ``policy.json``'s contents and return them as format 2 describes a policy
    (a new dict; ``format`` keeps the file's own). Raises ``PolicyError`` (one line, prefixed by
    ``where``) for anything that is missing, of the wrong type or inconsistent.

    Format 2 (``ccjax-policy/2``) fields:

    * ``network``: the network (``NETWORKS``): its ``kind``, ``activation``, ``hidden`` widths,
      ``pref_dim`` and the kind's own sizes (``pn_width``; ``head_width``, ``n_actions``,
      ``n_objectives``), the same dict the agent's ``export_network()`` returns;
    * the environment it was trained in: ``features`` (``mocc``, ``auto``), ``action_map``
      (``actions.ACTION_MAPS``), ``objectives`` (names; a preference has one weight each),
      ``history`` (MIs), ``alpha`` (MOCC Eq. 1), ``mi_rtts``, ``mi_min_rtts`` (AUTO Eq. 6's MI
      cap in minimum RTTs, null for none), ``min_rate``/``max_rate`` (bytes/s), ``log_ratios``;
    * ``preference``: the weights it was trained or adapted for, or null; ``algo``, ``format``.

    Format 1 (``ccjax-policy/1``, the first MOCC/Aurora files) has the Gaussian network's
    fields at the top level (``hidden``, ``pn_width``, ``pref_dim``, ``activation``) and means
    MOCC's features and action map, MOCC's three objectives, no MI cap, and ``log_ratios``
    false where the field is absent."""

    def fail(msg: str) -> None:
        raise PolicyError(f"{where}: {msg}")

    def need(cond: bool, field: str, value: Any, allowed: str) -> None:
        if not cond:
            fail(f"{field}={value!r} is invalid: {allowed}")

    if not isinstance(meta, Mapping):
        fail(f"{META_FILE} is not a JSON object")
    fmt = meta.get("format")
    need(fmt in FORMATS, "format", fmt,
         f"one of {', '.join(map(repr, FORMATS))} (the formats this version of ccjax reads)")
    m = dict(meta)
    if fmt == FORMAT_V1:
        for name, typ in V1_FIELDS.items():
            if name not in m:
                fail(f"the field {name!r} is missing")
            need(_is(m[name], typ), name, m[name], _type_name(typ))
        log_ratios = m.get("log_ratios", False)  # absent in files that predate the field
        need(isinstance(log_ratios, bool), "log_ratios", log_ratios, "true or false")
        net = {"kind": "gaussian-mlp",
               **{k: m[k] for k in ("activation", "hidden", "pn_width", "pref_dim")}}
        m.update(network=net, features="mocc", action_map="mocc",
                 objectives=list(MOCC_OBJECTIVES), mi_min_rtts=None, log_ratios=log_ratios)
    for name, typ in V2_FIELDS.items():
        if name not in m:
            fail(f"the field {name!r} is missing")
        need(_is(m[name], typ), name, m[name], _type_name(typ))
    for name in ("alpha", "mi_rtts", "min_rate", "max_rate", "mi_min_rtts"):
        v = m[name]
        need(v is None or math.isfinite(v), name, v, "a finite number")
    need(bool(m["algo"]), "algo", m["algo"], "a non-empty name")
    objs = m["objectives"]
    need(len(objs) >= 1 and all(isinstance(o, str) and o for o in objs)
         and len(set(objs)) == len(objs), "objectives", objs, "a list of distinct names")
    need(m["features"] in FEATURES, "features", m["features"], f"one of {', '.join(FEATURES)}")
    need(m["action_map"] in actions.ACTION_MAPS, "action_map", m["action_map"],
         f"one of {', '.join(actions.ACTION_MAPS)}")
    need(m["history"] >= 1, "history", m["history"], ">= 1")
    need(m["alpha"] > 0, "alpha", m["alpha"], "> 0")
    need(m["mi_rtts"] > 0, "mi_rtts", m["mi_rtts"], "> 0 RTTs")
    need(m["mi_min_rtts"] is None or m["mi_min_rtts"] > 0, "mi_min_rtts", m["mi_min_rtts"],
         "> 0 minimum RTTs, or null for no cap")
    need(0 < m["min_rate"] < m["max_rate"], "min_rate", m["min_rate"],
         f"0 < min_rate < max_rate={m['max_rate']!r}")
    m["network"] = net = _check_network(m["network"], m, need, fail)
    if m["preference"] is not None:
        need(net["pref_dim"] > 0, "preference", m["preference"],
             "null for a policy without preference input (pref_dim=0)")
        try:
            m["preference"] = list(check_preference(m["preference"], objs))
        except ValueError as e:
            fail(str(e))
    m["objectives"] = list(objs)
    return m


def _check_network(net: dict, m: dict, need, fail) -> dict:
    kind = net.get("kind")
    need(kind in NETWORKS, "network.kind", kind, f"one of {', '.join(NETWORKS)}")
    fields = NETWORKS[kind]
    for name, typ in fields.items():
        if name not in net:
            fail(f"the field 'network.{name}' is missing (network kind {kind!r})")
        need(_is(net[name], typ), f"network.{name}", net[name], _type_name(typ))
    extra = sorted(set(net) - set(fields))
    need(not extra, "network", extra, f"fields a {kind!r} network does not have")
    activation, action_kind = NETWORK_KINDS[kind]
    need(net["activation"] == activation, "network.activation", net["activation"],
         f"{activation!r} for a {kind!r} network")
    hidden = net["hidden"]
    need(len(hidden) >= 1 and all(_is(h, int) and h >= 1 for h in hidden), "network.hidden",
         hidden, "a list of positive layer widths")
    for name in ("pn_width", "head_width", "n_actions", "n_objectives"):
        if name in fields:
            need(net[name] >= 1, f"network.{name}", net[name], ">= 1")
    k = len(m["objectives"])
    names = ", ".join(m["objectives"])
    need(net["pref_dim"] in (0, k), "network.pref_dim", net["pref_dim"],
         f"0 or the number of objectives ({k}: {names})")
    if "n_objectives" in fields:
        need(net["n_objectives"] == k, "network.n_objectives", net["n_objectives"],
             f"the number of objectives ({k}: {names})")
    n_out = net.get("n_actions", 1)
    want = actions.ACTION_MAPS[m["action_map"]]
    need(want == (action_kind, n_out), "action_map", m["action_map"],
         f"a map taking the {kind!r} network's action ({action_kind} of {n_out}); "
         f"{m['action_map']!r} takes a {want[0]} of {want[1]}")
    return dict(net)


def expected_shapes(meta: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The weights (flattened flax names) and shapes of the network that ``meta`` (as
    ``read_meta`` returns it) describes."""
    net = meta["network"]
    n_state = len(FEATURES[meta["features"]]) * int(meta["history"])
    pref_dim = int(net["pref_dim"])
    want: dict[str, tuple[int, ...]] = {}
    if net["kind"] == "gaussian-mlp":
        prefix = "trunk/h"
        if pref_dim:
            want["trunk/pn/kernel"] = (pref_dim, net["pn_width"])
            want["trunk/pn/bias"] = (net["pn_width"],)
            n_in = net["pn_width"] + n_state
        else:
            n_in = n_state
    else:
        prefix = "trunk_h"
        n_in = n_state
    for i, h in enumerate(net["hidden"]):
        want[f"{prefix}{i}/kernel"] = (n_in, h)
        want[f"{prefix}{i}/bias"] = (h,)
        n_in = h
    if net["kind"] == "gaussian-mlp":
        want.update({"mean/kernel": (n_in, 1), "mean/bias": (1,), "log_std": (1,)})
    else:
        z, hw = n_in + pref_dim, net["head_width"]
        for head, n_out in (("pi", net["n_actions"]), ("v", net["n_objectives"])):
            want[f"{head}_h0/kernel"] = (z, hw)
            want[f"{head}_h0/bias"] = (hw,)
            want[f"{head}_out/kernel"] = (hw, n_out)
            want[f"{head}_out/bias"] = (n_out,)
    return want


class Policy:
    """A policy's network as a NumPy forward pass, identical to its flax module:

    * ``gaussian-mlp`` (``ccjax.agents.networks.GaussianActor``, PPO-MOCC and Aurora):
      [tanh(Dense_pn(w)), history] -> tanh Dense layers -> linear mean (MOCC §3.2: two hidden
      layers of 64 and 32 tanh units plus the PN); the action is the mean;
    * ``discrete-pref-after-trunk`` (``networks.PrefAfterTrunk``, AUTO §3.2): ReLU trunk over
      the history, [trunk, w] -> ReLU layer -> logits; the action is the argmax (the value
      head's weights are checked but not evaluated).

    ``meta`` is a ``policy.json``'s contents, either format (``read_meta``)."""

    def __init__(self, weights: Mapping[str, np.ndarray], meta: Mapping[str, Any],
                 where: str = "policy") -> None:
        self.meta = m = read_meta(meta, where)
        net = m["network"]
        self.network: dict[str, Any] = net
        self.kind: str = net["kind"]
        self.algo: str = m["algo"]
        self.hidden: list[int] = [int(h) for h in net["hidden"]]
        self.pn_width: int | None = net.get("pn_width")
        self.head_width: int | None = net.get("head_width")
        self.pref_dim = int(net["pref_dim"])
        self.n_actions: int | None = net.get("n_actions")
        self.features: str = m["features"]
        self.n_features = len(FEATURES[self.features])
        self.action_map: str = m["action_map"]
        self.objectives: tuple[str, ...] = tuple(m["objectives"])
        self.history = int(m["history"])
        self.alpha = float(m["alpha"])
        self.mi_rtts = float(m["mi_rtts"])
        mi_cap = m["mi_min_rtts"]
        self.mi_min_rtts = math.inf if mi_cap is None else float(mi_cap)
        self.min_rate = float(m["min_rate"])
        self.max_rate = float(m["max_rate"])
        self.log_ratios: bool = m["log_ratios"]
        pref = m["preference"]
        self.preference: tuple[float, ...] | None = None if pref is None else tuple(pref)
        _check_weights(weights, expected_shapes(m), where)
        w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
        if self.kind == "gaussian-mlp":
            self._pn = (w["trunk/pn/kernel"], w["trunk/pn/bias"]) if self.pref_dim else None
            self._layers = [(w[f"trunk/h{i}/kernel"], w[f"trunk/h{i}/bias"])
                            for i in range(len(self.hidden))]
            self._head = (w["mean/kernel"], w["mean/bias"])
        else:
            self._layers = [(w[f"trunk_h{i}/kernel"], w[f"trunk_h{i}/bias"])
                            for i in range(len(self.hidden))]
            self._pi = [(w["pi_h0/kernel"], w["pi_h0/bias"]),
                        (w["pi_out/kernel"], w["pi_out/bias"])]

    @property
    def obs_dim(self) -> int:
        return self.pref_dim + self.n_features * self.history

    @property
    def stats_fields(self) -> tuple[str, ...]:
        """The per-MI measurements ``Sender.report_status`` needs for this policy."""
        return AUTO_STATS_FIELDS if self.features == "auto" else STATS_FIELDS

    def _input(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, np.float64)
        if x.shape[-1:] != (self.obs_dim,):
            raise ValueError(f"obs has shape {x.shape}: the last axis must be obs_dim="
                             f"{self.obs_dim} ({self.pref_dim} preference + "
                             f"{self.n_features} x {self.history} history)")
        return x

    def forward(self, obs: np.ndarray) -> np.ndarray:
        """The network's output for observation(s) of shape (..., obs_dim): the mean (..., 1)
        of a Gaussian policy, the logits (..., n_actions) of a discrete one."""
        x = self._input(obs)
        if self.kind == "gaussian-mlp":
            if self._pn is not None:
                k, b = self._pn
                w, hist = x[..., : self.pref_dim], x[..., self.pref_dim:]
                x = np.concatenate([np.tanh(w @ k + b), hist], -1)
            for k, b in self._layers:
                x = np.tanh(x @ k + b)
            k, b = self._head
            return x @ k + b
        w, h = x[..., : self.pref_dim], x[..., self.pref_dim:]
        for k, b in self._layers:
            h = np.maximum(h @ k + b, 0.0)
        (k0, b0), (k1, b1) = self._pi
        p = np.maximum(np.concatenate([h, w], -1) @ k0 + b0, 0.0)
        return p @ k1 + b1

    def mean(self, obs: np.ndarray) -> np.ndarray:
        """Mean action(s), shape (..., 1), of a Gaussian policy."""
        if self.kind != "gaussian-mlp":
            raise ValueError(f"this {self.kind!r} policy has no mean action: use logits or act")
        return self.forward(obs)

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """Logits (..., n_actions) of a discrete policy."""
        if self.kind == "gaussian-mlp":
            raise ValueError("this 'gaussian-mlp' policy has no logits: use mean or act")
        return self.forward(obs)

    def actions(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic actions (...,) for observations (..., obs_dim): the Gaussian's mean
        (float), or the argmax of the logits (int, the first of equal ones)."""
        out = self.forward(obs)
        if self.kind == "gaussian-mlp":
            return out[..., 0]
        return np.argmax(out, -1).astype(np.int32)

    def act(self, obs: np.ndarray) -> float | int:
        """The deterministic action for one observation: a float (the Gaussian's mean) or an
        int (the action index)."""
        a = self.actions(np.asarray(obs, np.float64).reshape(-1))
        return float(a) if self.kind == "gaussian-mlp" else int(a)


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
    where = f"policy {str(d)!r}"
    try:
        meta = json.loads((d / META_FILE).read_text())
    except (OSError, ValueError) as e:
        raise PolicyError(f"{where}: {META_FILE} is not valid JSON ({e})") from None
    meta = read_meta(meta, where)  # the fields before the weights are opened
    return Policy(read_weights(d / PARAMS_FILE), meta, where)


#: what reading a damaged .npz raises: numpy's header errors (ValueError), a truncated or
#: overwritten archive (zipfile.BadZipFile, EOFError), a damaged deflate stream (zlib.error),
#: a member zipfile cannot decompress (NotImplementedError)
_NPZ_ERRORS = (OSError, ValueError, EOFError, KeyError, NotImplementedError,
               zipfile.BadZipFile, zlib.error)


def read_weights(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of a policy's weights file (``policy.npz``), each checked to be numbers, all
    finite. A file that is not a readable .npz (cut short, overwritten) or holds NaN or inf
    (a training run that diverged) is a one-line ``PolicyError`` naming the file: a policy
    with non-finite weights would only ever answer NaN rates."""
    where = f"policy weights {str(path)!r}"
    try:
        with np.load(path, allow_pickle=False) as z:
            weights = {k: z[k] for k in z.files}
    except _NPZ_ERRORS as e:
        why = " ".join(str(e).split()) or type(e).__name__
        raise PolicyError(f"{where} is invalid: not a readable .npz ({why}); allowed: the "
                          "file ccjax.agents.export.save_policy writes (cut short or "
                          "overwritten?)") from None
    _check_finite(weights, where)
    return weights


def _check_finite(weights: Mapping[str, Any], where: str) -> None:
    for k, v in weights.items():
        a = np.asarray(v)
        if a.dtype.kind not in "fiu":  # booleans, strings, dates are no weights
            raise PolicyError(f"{where}: weight {k!r} is invalid: dtype {a.dtype}; allowed: "
                              "floating-point numbers")
        bad = int(a.size - np.count_nonzero(np.isfinite(a)))
        if bad:
            raise PolicyError(f"{where}: weight {k!r} is invalid: {bad} of its {a.size} values "
                              "are NaN or infinite; allowed: finite weights (did its training "
                              "diverge?)")


def _check_weights(weights: Mapping[str, np.ndarray], want: Mapping[str, tuple[int, ...]],
                   where: str = "policy") -> None:
    _check_finite(weights, where)
    if set(weights) != set(want):
        raise PolicyError(f"{where}: weights {sorted(weights)} do not match the network "
                          f"{sorted(want)} (missing {sorted(set(want) - set(weights))}, "
                          f"extra {sorted(set(weights) - set(want))})")
    for k, shape in want.items():
        if tuple(np.shape(weights[k])) != shape:
            raise PolicyError(f"{where}: weight {k} has shape {tuple(np.shape(weights[k]))}, "
                              f"expected {shape}")


_COUNTS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


def check_preference(w: Sequence[float], names: Sequence[str] = MOCC_OBJECTIVES
                     ) -> tuple[float, ...]:
    """A preference on the simplex: one finite weight >= 0 per objective (``names``; MOCC's
    thr, lat, loss by default), summing to 1 (within 1e-6), the rule the training environment
    enforces (``ccjax.envs.build.check_preference``)."""
    k = len(names)
    what = f"{_COUNTS.get(k, str(k))} weights {', '.join('w_' + n for n in names)}"
    try:
        v = [float(x) for x in w]
    except (TypeError, ValueError):
        raise ValueError(f"preference {w!r} is invalid: {what}") from None
    if len(v) != k:
        raise ValueError(f"preference {v} is invalid: {what}")
    if not all(math.isfinite(x) and x >= 0 for x in v):
        raise ValueError(f"preference {v} is invalid: weights must be >= 0")
    if abs(sum(v) - 1.0) > 1e-6:
        raise ValueError(f"preference {v} is invalid: weights must sum to 1 (sum {sum(v):g})")
    return tuple(v)


def _field(stats: Any, name: str, fields: Sequence[str] = STATS_FIELDS) -> float:
    try:
        v = stats[name] if isinstance(stats, Mapping) else getattr(stats, name)
    except (KeyError, AttributeError):
        raise ValueError(f"stats lacks {name!r}; report_status needs "
                         f"{', '.join(fields)}") from None
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"stats {name}={v} is invalid: a finite number")
    return v


class Sender:
    """One connection's rate controller for any policy (MOCC §6's library): ``register(w)``,
    ``report_status(stats)`` once per MI, ``get_sending_rate()``, and the MI lengths
    ``first_interval_s`` / ``next_interval_s``. See the module docstring."""

    def __init__(self, policy: Policy, init_rate: float,
                 preference: Sequence[float] | None = None) -> None:
        """``init_rate`` (bytes/s) is the rate the policy's first decision changes (the training
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
        self._hist = np.tile(np.asarray(FEATURES[policy.features], np.float64),
                             (policy.history, 1))
        self._min_lat = math.inf  # running minimum of per-MI mean RTT (latency ratio)
        self._act_feat = 0.0  # the previous action as a feature (AUTO's fifth)
        self._action: float | int | None = None
        self._started = False

    def register(self, w: Sequence[float]) -> None:
        """Set the application's preference (one weight per objective of the policy, e.g.
        w_thr, w_lat, w_loss for MOCC) on the simplex; it takes effect at the next decision.
        Aurora policies (pref_dim 0) take none."""
        v = check_preference(w, self.policy.objectives)
        if not self.policy.pref_dim:
            raise ValueError(f"preference {list(v)} is invalid: this {self.policy.algo!r} "
                             "policy has no preference input (pref_dim=0)")
        self._pref = v

    @property
    def preference(self) -> tuple[float, ...] | None:
        return self._pref

    @property
    def last_action(self) -> float | int | None:
        """The policy's latest action (None before the first decision)."""
        return self._action

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
        ``ccjax.envs.features.mi_features`` / ``auto_features`` compute them."""
        fields = self.policy.stats_fields
        send = _field(stats, "send_rate", fields)
        thr = _field(stats, "delivery_rate", fields)
        dur = _field(stats, "duration_s", fields)
        got = _field(stats, "rtt_samples", fields) > 0
        # Aurora's guard: no delivery, or a ratio of 1000 or more, reads as 1 (a stalled path).
        send_ratio = send / max(thr, 1e-30) if (thr > 0 and send < 1000.0 * thr) else 1.0
        min_lat, lat_ratio, grad = self._min_lat, 1.0, 0.0
        if got:  # else Aurora's neutral values, the minimum unchanged
            lat = _field(stats, "rtt_mean", fields)
            h1 = _field(stats, "rtt_first_half", fields)
            h2 = _field(stats, "rtt_second_half", fields)
            # the minimum of per-MI means, not of RTT samples (MOCC notes §7.6, Aurora)
            min_lat = min(self._min_lat, lat)
            lat_ratio = lat / max(min_lat, 1e-9)
            grad = (h2 - h1) / max(dur, 1e-9)
        if self.policy.features == "auto":
            loss = _field(stats, "loss_rate", fields)
            feat = [lat_ratio, send_ratio, loss, grad, self._act_feat]
        else:
            feat = [send_ratio, lat_ratio, grad]
        return np.asarray(feat, np.float64), min_lat

    def _decide(self) -> None:
        p = self.policy
        a = p.act(self.observation())
        with np.errstate(all="ignore"):  # the branch ``where`` does not take may overflow
            rate = actions.apply_action(p.action_map, self._rate, a, p.alpha, p.min_rate,
                                        p.max_rate, np)
        self._rate = float(rate)
        self._act_feat = float(actions.action_feature(p.action_map, a, np))
        self._action = a

    def _start(self) -> None:
        if not self._started:
            self._decide()  # the environment's first step acts on the empty history
            self._started = True

    def report_status(self, stats: Any) -> float:
        """Report one finished MI (a dict or an object with ``policy.stats_fields``: rates in
        bytes/s, times in s, ``rtt_samples`` > 0 when any ACK carried an RTT sample,
        ``loss_rate`` the lost share of the bytes learned about); returns the rate (bytes/s)
        for the next MI."""
        self._start()
        feat, self._min_lat = self._features(stats)
        self._hist = np.concatenate([self._hist[1:], feat[None]], 0)
        self._decide()
        return self._rate

    def get_sending_rate(self) -> float:
        """The rate (bytes/s) to send at until the next ``report_status``."""
        self._start()
        return self._rate

    def next_interval_s(self, rtt_mean: float, min_rtt: float | None = None) -> float:
        """Length of the next MI: ``mi_rtts`` (Aurora: 0.5) x the mean RTT of the last MI, and
        for a policy with an MI cap (AUTO Eq. 6: ``mi_min_rtts`` = 1.5) at most
        ``mi_min_rtts`` x ``min_rtt``, the least RTT the sender has seen (a ``min_rtt`` of 0 or
        inf, none measured yet, leaves the MI uncapped, as in training)."""
        mi = self.policy.mi_rtts * float(rtt_mean)
        if not math.isfinite(self.policy.mi_min_rtts):
            return mi
        if min_rtt is None:
            raise ValueError(f"min_rtt=None is invalid: this policy caps its MI at "
                             f"{self.policy.mi_min_rtts:g} x the minimum RTT; pass the least "
                             "RTT the sender has seen")
        cap = self.policy.mi_min_rtts * float(min_rtt)
        return min(mi, cap) if (math.isfinite(cap) and cap > 0) else mi

    @staticmethod
    def first_interval_s(base_rtt: float) -> float:
        """Length of the first MI, before any RTT was measured in one: 3 x the one-way latency,
        1.5 x the base (handshake) RTT, as in Aurora's simulator and the training env."""
        return 1.5 * float(base_rtt)


#: MOCC §6's name for the controller; the same class as ``Sender``
MOCC = Sender
