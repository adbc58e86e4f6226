"""Save a trained actor for deployment and load it back (the JAX side of ``ccjax.deploy``).

A policy directory holds two files; ``ccjax.deploy`` reads the same files with NumPy alone, so
a datapath needs neither JAX nor this package:

* ``policy.npz``: the network's flax params, flattened with
  ``flax.traverse_util.flatten_dict(params["params"], sep="/")``. For ``gaussian-mlp``
  (``ccjax.agents.networks.GaussianActor``, PPO-MOCC and Aurora): ``trunk/pn/kernel``,
  ``trunk/pn/bias`` (MOCC's preference sub-network, only when ``pref_dim`` > 0),
  ``trunk/h0/kernel``, ``trunk/h0/bias``, ``trunk/h1/...``, ``mean/kernel``, ``mean/bias``,
  ``log_std``. For ``discrete-pref-after-trunk`` (``networks.PrefAfterTrunk``, AUTO):
  ``trunk_h{i}/{kernel,bias}``, ``pi_h0``, ``pi_out``, ``v_h0``, ``v_out`` (the whole network:
  the policy head needs the trunk; deployment evaluates only the policy head).
* ``policy.json``: format ``ccjax-policy/2``: the network's description (``"network"``, what
  the agent's ``export_network()`` returns), what the environment did around the network in
  training (``features``, ``action_map``, ``objectives``, ``history``, ``alpha``, ``mi_rtts``,
  ``mi_min_rtts`` (null: no MI cap), ``min_rate``, ``max_rate`` in bytes/s, ``log_ratios``),
  the preference the model was trained or adapted for (``null`` if none), ``algo`` and
  ``format``. The fields and their rules have one home, ``ccjax.deploy.read_meta``, which both
  readers use (this module turns its ``PolicyError`` into a ``ConfigError``).

The network's fields live only under ``"network"``: format 2 writes no top-level copies of
``hidden``, ``pn_width``, ``pref_dim`` and ``activation`` (format 1's places for them), since no
format-1 reader would read the file anyway (each refuses any other format) and two copies could
disagree. Format 1 (``ccjax-policy/1``, the shipped ``mocc`` model) is still read: it means a
``gaussian-mlp``, MOCC's features and action map, MOCC's three objectives and no MI cap.

Only the deterministic action is used at deployment (``deterministic_action``): the Gaussian's
mean (MOCC §6 runs the trained actor and no exploration), or the argmax of AUTO's logits.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from ccjax import deploy
from ccjax.agents.networks import GaussianActor, PrefAfterTrunk
from ccjax.envs.build import check_preference
from ccjax.envs.features import FEATURE_SETS, state_dim
from ccjax.envs.single_flow import EnvParams, SingleFlowEnv
from ccjax.errors import ConfigError, require

FORMAT = deploy.FORMAT
FORMAT_V1 = deploy.FORMAT_V1
FORMATS = deploy.FORMATS
PARAMS_FILE = deploy.PARAMS_FILE
META_FILE = deploy.META_FILE
#: network kind -> its flax module class (``network_module`` builds one from a description)
NETWORK_MODULES: dict[str, type[nn.Module]] = {"gaussian-mlp": GaussianActor,
                                               "discrete-pref-after-trunk": PrefAfterTrunk}


class LoadedPolicy(NamedTuple):
    """What ``load_policy`` returns (unpacks as ``module, params, meta``)."""

    module: nn.Module  # the network, built from meta["network"] (``network_module``)
    params: dict  # its flax variables, {"params": ...}, for ``module.apply``
    meta: dict  # policy.json in format 2's shape (``ccjax.deploy.read_meta``)


def network_module(net: Mapping[str, Any]) -> nn.Module:
    """The flax module a (validated) network description stands for."""
    kind = net["kind"]
    if kind == "gaussian-mlp":
        return GaussianActor(1, tuple(net["hidden"]), int(net["pref_dim"]), int(net["pn_width"]))
    if kind == "discrete-pref-after-trunk":
        return PrefAfterTrunk(tuple(net["hidden"]), int(net["head_width"]), int(net["pref_dim"]),
                              int(net["n_actions"]), int(net["n_objectives"]))
    raise ConfigError(f"network.kind={kind!r} is invalid: one of {', '.join(NETWORK_MODULES)}")


def greedy_action(kind: str, module: nn.Module, params: Any, obs: jnp.ndarray) -> jnp.ndarray:
    """(...,) deterministic actions of network ``kind`` for observations (..., obs_dim): the
    Gaussian's mean (float32), or the argmax of the logits (int32)."""
    out, _ = module.apply(params, obs)
    if kind == "gaussian-mlp":
        return out[..., 0]
    if kind == "discrete-pref-after-trunk":
        return jnp.argmax(out, -1).astype(jnp.int32)
    raise ConfigError(f"network.kind={kind!r} is invalid: one of {', '.join(NETWORK_MODULES)}")


def deterministic_action(meta: Mapping[str, Any], module: nn.Module, params: Any,
                         obs: jnp.ndarray) -> jnp.ndarray:
    """The greedy action of a loaded policy (``load_policy``'s three values) for ``obs``."""
    return greedy_action(meta["network"]["kind"], module, params, obs)


def obs_dim(meta: Mapping[str, Any]) -> int:
    """The network's input length: the preference, then ``history`` MIs of features."""
    return state_dim(int(meta["network"]["pref_dim"]), int(meta["history"]),
                     FEATURE_SETS[meta["features"]].n)


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


def _validated(meta: Any, where: str) -> dict:
    """``deploy.read_meta`` with its errors as ``ConfigError``."""
    try:
        return deploy.read_meta(meta, where)
    except deploy.PolicyError as e:
        raise ConfigError(str(e)) from None


def save_policy(path: str | os.PathLike, agent: Any, actor_params: dict, env: SingleFlowEnv,
                params: EnvParams, algo: str, preference: Sequence[float] | None = None
                ) -> Path:
    """Write ``policy.npz`` and ``policy.json`` (format ``ccjax-policy/2``) of a trained agent to
    the directory ``path`` (created if missing) and return it. ``agent`` is any registered
    agent: its ``export_network()`` describes the network; ``actor_params`` is that network's
    variable dict (``{"params": ...}``, the agent's ``actor_params(state)``); ``env`` and
    ``params`` give the observation layout, the action map and the MI rule it was trained
    with; ``preference`` (one weight per objective) the one it runs at unless told otherwise."""
    require(isinstance(algo, str) and bool(algo), "algo", algo, "a non-empty name")
    export = getattr(agent, "export_network", None)
    require(callable(export), "agent", type(agent).__name__,
            "an agent with export_network() (ccjax.agents.registry)")
    net = dict(export())
    pref_dim = net.get("pref_dim")
    want = env.pref_dim
    require(pref_dim == want, "pref_dim", pref_dim,
            f"{want}: the environment's observation has "
            f"{f'{want} preference weights' if want else 'no preference'}")
    names = tuple(env.objectives)
    pref = (None if preference is None
            else [float(x) for x in check_preference(preference, names=names)])
    require(pref is None or pref_dim > 0, "preference", preference,
            "null for a policy without preference input (pref_dim=0)")
    try:
        flat = traverse_util.flatten_dict(actor_params["params"], sep="/")
    except (KeyError, TypeError):
        raise ConfigError("actor_params is invalid: a flax variable dict {'params': ...}, "
                          "such as the agent's actor_params(state)") from None
    arrays = {k: np.asarray(jax.device_get(v), np.float32) for k, v in flat.items()}
    cap = float(params.mi_min_rtts)
    meta: dict[str, Any] = {
        "format": FORMAT, "algo": algo, "network": net, "features": env.features,
        "action_map": env.action_map, "objectives": list(names), "history": int(env.history),
        "alpha": float(params.alpha), "mi_rtts": float(params.mi_rtts),
        "mi_min_rtts": None if math.isinf(cap) else cap,
        "min_rate": float(params.min_rate), "max_rate": float(params.max_rate),
        "log_ratios": bool(env.log_ratios), "preference": pref,
    }
    meta = _validated(meta, "policy")  # what is written is what both readers accept
    _check_shapes(network_module(meta["network"]), meta, arrays)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    # The weights go first: a reader that finds the new json finds the new weights beside it.
    _write_atomic(out / PARAMS_FILE, lambda f: np.savez(f, **arrays))
    _write_atomic(out / META_FILE,
                  lambda f: f.write((json.dumps(meta, indent=2) + "\n").encode()))
    return out


def load_policy(path: str | os.PathLike) -> LoadedPolicy:
    """Read a policy directory of either format: ``(module, params, meta)``, where ``module``
    is the flax network the file describes, ``params`` its variable dict for ``module.apply``
    and ``meta`` the metadata in format 2's shape (a format-1 file's ``network``, ``features``,
    ... filled in; ``meta["format"]`` is the file's own). ``deterministic_action(meta, module,
    params, obs)`` runs it. Raises a one-line ``ConfigError`` on a missing file, an unknown
    format, a missing or invalid field, or weights that do not fit the described network."""
    d = Path(path)
    require(d.is_dir(), "policy", str(d), "a directory holding policy.npz and policy.json")
    p = d / META_FILE
    require(p.is_file(), "policy", str(d), f"{META_FILE} is missing")
    try:
        raw = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"policy={str(p)!r} is invalid: not readable JSON ({e})") from None
    meta = _validated(raw, f"policy {str(d)!r}")
    npz = d / PARAMS_FILE
    require(npz.is_file(), "policy", str(d), f"{PARAMS_FILE} is missing")
    try:
        arrays = deploy.read_weights(npz)  # readable, numbers, finite
    except deploy.PolicyError as e:
        raise ConfigError(str(e)) from None
    module = network_module(meta["network"])
    _check_shapes(module, meta, arrays)
    params = traverse_util.unflatten_dict(
        {k: jnp.asarray(v, jnp.float32) for k, v in arrays.items()}, sep="/")
    return LoadedPolicy(module, {"params": params}, meta)


def _check_shapes(module: nn.Module, meta: Mapping[str, Any],
                  arrays: Mapping[str, np.ndarray]) -> None:
    """The saved arrays must be exactly the params of ``module`` for this observation size (the
    shapes its ``init`` gives, traced abstractly)."""
    shapes = jax.eval_shape(module.init, jax.random.PRNGKey(0),
                            jnp.zeros((1, obs_dim(meta)), jnp.float32))
    want = {k: tuple(v.shape)
            for k, v in traverse_util.flatten_dict(shapes["params"], sep="/").items()}
    missing = sorted(set(want) - set(arrays))
    extra = sorted(set(arrays) - set(want))
    require(not missing, "policy params", missing, "missing from the weights")
    require(not extra, "policy params", extra, "not part of this network")
    net = meta["network"]
    sizes = ", ".join(f"{k}={v}" for k, v in net.items() if k not in ("kind", "activation"))
    for k, shape in want.items():
        require(tuple(arrays[k].shape) == shape, k, tuple(arrays[k].shape),
                f"shape {shape} for a {net['kind']} network with {sizes}, "
                f"{meta['features']} features, history={meta['history']}")
