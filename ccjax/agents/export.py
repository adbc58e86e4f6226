"""Save a trained actor for deployment and load it back (the JAX side of ``ccjax.deploy``).

A policy directory holds two files (format ``ccjax-policy/1``; ``ccjax.deploy`` reads the same
files with NumPy alone, so a datapath needs neither JAX nor this package):

* ``policy.npz``: the actor's flax params, flattened with
  ``flax.traverse_util.flatten_dict(params["params"], sep="/")``: ``trunk/pn/kernel``,
  ``trunk/pn/bias`` (MOCC's preference sub-network, only when ``pref_dim`` > 0),
  ``trunk/h0/kernel``, ``trunk/h0/bias``, ``trunk/h1/...``, ``mean/kernel``, ``mean/bias``,
  ``log_std`` (``ccjax.agents.networks.GaussianActor``);
* ``policy.json``: what the forward pass and the rate update need beside the weights: network
  sizes, the observation's history length, MOCC Eq. 1's ``alpha``, the MI length in RTTs
  (Aurora: 0.5), the rate bounds (bytes/s), the preference the model was trained or adapted
  for (``null`` if none) and ``log_ratios`` (the sending and latency ratios enter the network as
  logs, ``ccjax.envs.features.encode``; a file without the field predates it and means false).

Only the deterministic action (the Gaussian's mean) is used at deployment: MOCC §6 runs the
trained actor and no exploration.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from ccjax.agents.ppo import PPO
from ccjax.envs.build import check_preference
from ccjax.envs.features import state_dim
from ccjax.envs.single_flow import EnvParams, SingleFlowEnv
from ccjax.errors import ConfigError, require

FORMAT = "ccjax-policy/1"
PARAMS_FILE = "policy.npz"
META_FILE = "policy.json"
#: the json fields every policy carries, and their types (``preference`` may also be null)
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "format": str, "algo": str, "hidden": list, "pn_width": int, "pref_dim": int,
    "history": int, "alpha": (int, float), "mi_rtts": (int, float), "min_rate": (int, float),
    "max_rate": (int, float), "activation": str, "preference": (list, type(None)),
}
#: fields added after the format's first files, with the value a file without them means
OPTIONAL_FIELDS: dict[str, Any] = {"log_ratios": False}


def _write_atomic(dest: Path, write) -> None:
    """Write through a temporary file in the same directory, then ``os.replace`` it: a reader
    never sees a half-written file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_policy(path: str | os.PathLike, agent: PPO, actor_params: dict, env: SingleFlowEnv,
                params: EnvParams, algo: str, preference: Sequence[float] | None = None
                ) -> Path:
    """Write ``policy.npz`` and ``policy.json`` of a PPO actor (MOCC or Aurora) to the directory
    ``path`` (created if missing) and return it. ``actor_params`` is the actor's variable dict
    (``{"params": ...}``, e.g. ``PPOState.actor``); ``env`` and ``params`` give the observation
    layout and the rate update the actor was trained with."""
    require(isinstance(algo, str) and bool(algo), "algo", algo, "a non-empty name")
    want_pref = 3 if env.use_pref else 0
    require(agent.pref_dim == want_pref, "pref_dim", agent.pref_dim,
            f"{want_pref}: the environment's observation {'has' if want_pref else 'has no'} "
            "preference")
    pref = None if preference is None else [float(x) for x in check_preference(preference)]
    require(pref is None or agent.pref_dim > 0, "preference", preference,
            "null for a policy without preference input (pref_dim=0)")
    try:
        flat = traverse_util.flatten_dict(actor_params["params"], sep="/")
    except (KeyError, TypeError):
        raise ConfigError("actor_params is invalid: a flax variable dict {'params': ...}, "
                          "such as PPOState.actor") from None
    arrays = {k: np.asarray(jax.device_get(v), np.float32) for k, v in flat.items()}
    _check_shapes(agent, env.history, arrays)
    meta: dict[str, Any] = {
        "format": FORMAT, "algo": algo, "hidden": [int(h) for h in agent.hidden],
        "pn_width": int(agent.pn_width), "pref_dim": int(agent.pref_dim),
        "history": int(env.history), "alpha": float(params.alpha),
        "mi_rtts": float(params.mi_rtts), "min_rate": float(params.min_rate),
        "max_rate": float(params.max_rate), "activation": "tanh", "preference": pref,
        "log_ratios": bool(env.log_ratios),
    }
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    # The weights go first: a reader that finds the new json finds the new weights beside it.
    _write_atomic(out / PARAMS_FILE, lambda f: np.savez(f, **arrays))
    _write_atomic(out / META_FILE,
                  lambda f: f.write((json.dumps(meta, indent=2) + "\n").encode()))
    return out


def load_policy(path: str | os.PathLike) -> tuple[PPO, dict, dict]:
    """Read a policy directory: ``(agent, actor_params, meta)`` where ``agent`` is a ``PPO`` with
    the saved network sizes, ``actor_params`` a flax variable dict for ``agent.actor_net.apply``
    and ``meta`` the json metadata. Raises ``ConfigError`` on a missing file, another format or
    weights that do not fit the metadata."""
    d = Path(path)
    require(d.is_dir(), "policy", str(d), "a directory holding policy.npz and policy.json")
    meta = _read_meta(d / META_FILE)
    npz = d / PARAMS_FILE
    require(npz.is_file(), "policy", str(d), f"{PARAMS_FILE} is missing")
    try:
        with np.load(npz, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise ConfigError(f"policy={str(npz)!r} is invalid: not a readable .npz ({e})") from None
    agent = PPO(hidden=tuple(meta["hidden"]), pn_width=meta["pn_width"],
                pref_dim=meta["pref_dim"])
    _check_shapes(agent, meta["history"], arrays)
    params = traverse_util.unflatten_dict(
        {k: jnp.asarray(v, jnp.float32) for k, v in arrays.items()}, sep="/")
    return agent, {"params": params}, meta


def _read_meta(p: Path) -> dict:
    require(p.is_file(), "policy", str(p.parent), f"{META_FILE} is missing")
    try:
        meta = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"policy={str(p)!r} is invalid: not readable JSON ({e})") from None
    require(isinstance(meta, dict), "policy", str(p), "a JSON object")
    require(meta.get("format") == FORMAT, "format", meta.get("format"),
            f"{FORMAT!r} (this version of ccjax reads only that format)")
    for name, typ in _FIELDS.items():
        if name not in meta:
            raise ConfigError(f"policy={str(p)!r} is invalid: the field {name!r} is missing")
        v = meta[name]
        require(isinstance(v, typ) and not isinstance(v, bool), name, v,
                f"of type {typ.__name__ if isinstance(typ, type) else typ[0].__name__}")
    require(len(meta["hidden"]) >= 1 and all(isinstance(h, int) and h >= 1
                                             for h in meta["hidden"]),
            "hidden", meta["hidden"], "a list of positive layer widths")
    for name, default in OPTIONAL_FIELDS.items():
        meta.setdefault(name, default)
    require(isinstance(meta["log_ratios"], bool), "log_ratios", meta["log_ratios"],
            "true or false")
    require(meta["pref_dim"] in (0, 3), "pref_dim", meta["pref_dim"], "0 (Aurora) or 3 (MOCC)")
    require(meta["pn_width"] >= 1, "pn_width", meta["pn_width"], ">= 1")
    require(meta["history"] >= 1, "history", meta["history"], ">= 1")
    require(meta["activation"] == "tanh", "activation", meta["activation"], "'tanh'")
    require(0 < meta["min_rate"] < meta["max_rate"], "min_rate", meta["min_rate"],
            f"0 < min_rate < max_rate={meta['max_rate']}")
    require(meta["alpha"] > 0 and meta["mi_rtts"] > 0, "alpha/mi_rtts",
            (meta["alpha"], meta["mi_rtts"]), "both > 0")
    if meta["preference"] is not None:
        check_preference(meta["preference"])
    return meta


def _check_shapes(agent: PPO, history: int, arrays: dict[str, np.ndarray]) -> None:
    """The saved arrays must be exactly the actor's params for this observation size."""
    obs_dim = state_dim(agent.pref_dim, history)
    shapes = jax.eval_shape(agent.actor_net.init, jax.random.PRNGKey(0),
                            jnp.zeros((1, obs_dim), jnp.float32))
    want = {k: tuple(v.shape)
            for k, v in traverse_util.flatten_dict(shapes["params"], sep="/").items()}
    missing = sorted(set(want) - set(arrays))
    extra = sorted(set(arrays) - set(want))
    require(not missing, "policy params", missing, "missing from the weights")
    require(not extra, "policy params", extra, "not part of this network")
    for k, shape in want.items():
        require(tuple(arrays[k].shape) == shape, k, tuple(arrays[k].shape),
                f"shape {shape} for hidden={list(agent.hidden)}, pn_width={agent.pn_width}, "
                f"pref_dim={agent.pref_dim}, history={history}")
