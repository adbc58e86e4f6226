"""The last bad inputs of issue 52: each is one line on stderr and exit code 2, raised as a
``ConfigError`` before anything is traced, never a traceback and never taken silently; and
every loader of a TOML file, fed random bytes or random documents, raises nothing else."""

from __future__ import annotations

import copy
import json
import math
import shutil
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccjax.cli import main
from ccjax.errors import ConfigError

MOCC = Path(__file__).resolve().parents[1] / "ccjax" / "models" / "mocc"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(code: int, err: str, *words: str) -> str:
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("ccjax: error:"), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.fixture
def no_run(monkeypatch):
    """Every simulation's tracing, training's environments, a sweep's batches and ns-3
    replaced by a failure: an input must be refused before any of them starts."""
    from ccjax import dirlock, evaluate, ns3, validation
    from ccjax.sim import run as sim_run
    from ccjax.sweep import runner
    from ccjax.train import setup, trainer

    def ran(*a, **k):
        raise AssertionError("it ran: the input was not refused first")

    for mod, name in ((sim_run, "make_runner"), (evaluate, "make_runner"), (setup, "VecEnv"),
                      (trainer.Trainer, "run"), (runner, "_run_local"), (runner, "run_batch"),
                      (dirlock.DirLock, "acquire"), (validation, "run_ns3"), (ns3, "build")):
        monkeypatch.setattr(mod, name, ran, raising=False)


def _free(monkeypatch, n_bytes: float) -> None:
    """The memory the check reads as available, fixed (the machine's own would decide)."""
    from ccjax import devices

    monkeypatch.setattr(devices, "free_memory_bytes", lambda device=None: (int(n_bytes),
                                                                           "host MemAvailable"))


# -- 1. TOML files that are not UTF-8 or not TOML, in all five loaders ----------------------------
_LOADERS = [
    (["simulate", "--scenario", "{p}"], "bad.toml"),
    (["train", "--algo", "{p}", "--out", "{tmp}/run"], "/bad.toml"),
    (["train", "--scenario", "{p}", "--out", "{tmp}/run"], "bad.toml"),
    (["eval", "--cc", "cubic", "--scenario", "{p}"], "bad.toml"),
    (["sweep", "{p}", "--out", "{tmp}/sw"], "/bad.toml"),
]


@pytest.mark.parametrize("argv,name", _LOADERS, ids=[a[0] + " " + a[1] for a, _ in _LOADERS])
def test_a_toml_file_not_utf8_or_not_toml_is_one_line_in_every_loader(capsys, no_run, tmp_path,
                                                                        argv, name):
    p = tmp_path / "bad.toml"
    for data, words in ((b'name = "x"\n# caf\xe9\n', ["not UTF-8 at byte 16", "line 2",
                                                      "0xe9", "allowed: UTF-8"]),
                        (b'name = "x"\nduration_s = = 3\n', ["invalid TOML syntax",
                                                              "at line 2"])):
        p.write_bytes(data)
        args = [a.replace("{p}", str(p)).replace("{tmp}", str(tmp_path)) for a in argv]
        code, out, err = _run(capsys, *args)
        _one_line_error(code, err, name, *words)
        assert out == ""


# -- 2. a buffer past float32 ---------------------------------------------------------------------
def test_a_buffer_past_what_the_queue_can_count_is_refused(capsys, no_run, tmp_path):
    from ccjax.sim.scenario import load_scenario

    code, _, err = _run(capsys, "simulate", "--buffer-pkts", "1e39", "--duration-s", "1")
    _one_line_error(code, err, "buffer_pkts=1e+39 is invalid", "at most 1e+09 packets")
    p = tmp_path / "big.toml"
    p.write_text("duration_s = 10\n[link]\nbandwidth_mbps = 10\nbuffer_pkts = 1e39\n"
                 "[flows]\nrtt_ms = 40\n")
    with pytest.raises(ConfigError, match=r"link.buffer_pkts=1e\+39 is invalid: .*<= 1e\+09"):
        load_scenario(p)


# -- 3. durations past int32 ticks or past the memory there is -------------------------------------
def test_durations_past_the_tick_count_or_the_memory_are_refused_before_tracing(
        capsys, no_run, monkeypatch):
    for argv in (["simulate", "--duration-s", "1e9"], ["simulate", "--duration-s", "1e7"],
                 ["eval", "--cc", "cubic", "--duration-s", "1e9"]):
        code, _, err = _run(capsys, *argv)
        _one_line_error(code, err, "duration_s=", "at most 1e+09 ticks",
                        "1e+06 s at the run's 1 ms tick")
    _free(monkeypatch, 8e9)
    # 1e9 ticks of 10 ms fit the tick count; 1e8 intervals of series do not fit 8 GB
    code, _, err = _run(capsys, "simulate", "--duration-s", "1e7", "--tick-ms", "10")
    _one_line_error(code, err, "duration_s=1e+07 is invalid", "about 186 GB of memory",
                    "1e+08 intervals of 0.1 s x 1 link(s) x 2 flow(s)", "8 GB is available",
                    "--series-interval-s", "about 4.3e+05 s fits")
    # validate: refused before ns-3 runs (its 16 ccjax seeds are the batch)
    code, _, err = _run(capsys, "validate", "--duration-s", "1e5")
    _one_line_error(code, err, "duration_s=100000 is invalid", "16 link(s)", "--ccjax-seeds")
    # the estimate scales: a two-second run is refused where almost nothing is free
    _free(monkeypatch, 1000)
    code, _, err = _run(capsys, "simulate", "--duration-s", "2")
    _one_line_error(code, err, "kB of memory", "1 kB is available")


def test_the_memory_estimate_is_what_xla_allocates(monkeypatch):
    """The series and final state as the estimate counts them against XLA's own figure for a
    small compiled run (its outputs: the series once, and the state)."""
    import jax

    from ccjax.api import link_from_flags
    from ccjax.cc.registry import get_controller
    from ccjax.sim.link import build_links, plan
    from ccjax.sim.run import SERIES_COPIES, make_runner, make_timeline, memory_needed

    specs = [link_from_flags(flows=2, bw_mbps=12.0, rtt_ms=[40.0], start_s=[0.0, 0.0])]
    cfg, horizon = plan(specs, 1.0, tick_s=1e-3, model="fluid")
    tl = make_timeline(1.0, 0.1, cfg.tick_s)
    ctl = get_controller("const")
    params = jax.tree.map(lambda x: x[None], ctl.default_params(2))
    compiled = make_runner(cfg, ctl, tl).lower(build_links(specs, cfg, horizon), params,
                                               jax.random.PRNGKey(0)[None]).compile()
    out = compiled.memory_analysis().output_size_in_bytes
    series, state = memory_needed(cfg, 1, tl)
    assert series / SERIES_COPIES <= out <= series / SERIES_COPIES + state


# -- 4. a truncated policy.npz wherever a policy is loaded ----------------------------------------
def test_a_truncated_policy_npz_is_one_line_naming_it(capsys, no_run, tmp_path):
    from ccjax import deploy
    from ccjax.agents.auto_adapt import AdaM
    from ccjax.agents.export import load_policy

    pol = tmp_path / "pol"
    shutil.copytree(MOCC, pol)
    npz = pol / "policy.npz"
    npz.write_bytes(npz.read_bytes()[:200])
    words = [f"'{npz}'", "not a readable .npz"]
    for argv in (["eval", "--model", str(pol), "--links", "1", "--duration-s", "1"],
                 ["simulate", "--cc", str(pol), "--duration-s", "1"]):
        code, _, err = _run(capsys, *argv)
        _one_line_error(code, err, *words)
    for load, error in ((load_policy, ConfigError), (deploy.load, deploy.PolicyError)):
        with pytest.raises(error) as e:
            load(pol)
        assert "\n" not in str(e.value) and all(w in str(e.value) for w in words)
    (tmp_path / "adam").mkdir()
    (tmp_path / "adam" / "adam.json").write_text("{}")
    (tmp_path / "adam" / "adam.npz").write_bytes(b"PK\x03\x04cut")
    with pytest.raises(ConfigError, match="adam.npz' is invalid: not a readable .npz"):
        AdaM.load(tmp_path / "adam")


# -- 5. a truncated curve parquet ------------------------------------------------------------------
def test_a_truncated_curve_parquet_is_one_line_naming_it(capsys, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ccjax.sweep.runner import _open
    from ccjax.sweep.spec import spec_from_dict

    spec = spec_from_dict({"name": "t", "algo": "ppo-mocc", "axes": {"seed": [0]},
                           "set": {"train": {"schedule": "fixed", "iters": 2, "n_envs": 8,
                                             "n_steps": 4},
                                   "env": {"preference": [0.45, 0.35, 0.2]}}}, "t.toml")
    _open(spec, tmp_path / "SW", resume=False).close()
    curve = tmp_path / "SW" / "curves" / f"{spec.trials[0].id}.parquet"
    curve.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"iteration": [0, 1], "reward": [0.1, 0.2]}), curve)
    curve.write_bytes(curve.read_bytes()[:40])
    code, _, err = _run(capsys, "plot", "curves", str(tmp_path / "SW"), "-o",
                        str(tmp_path / "c.png"))
    _one_line_error(code, err, f"curve='{curve}' is invalid", "not a readable Parquet file")


# -- 6. NaN weights refused; no NaN or Infinity in any --json -----------------------------------
def test_a_policy_with_non_finite_weights_is_refused_at_load(capsys, no_run, tmp_path):
    from ccjax import deploy

    for bad in (np.nan, np.inf):
        pol = tmp_path / f"pol-{bad}"
        shutil.copytree(MOCC, pol)
        with np.load(pol / "policy.npz") as z:
            w = {k: z[k].copy() for k in z.files}
        w["mean/bias"].flat[0] = bad
        np.savez(pol / "policy.npz", **w)
        code, out, err = _run(capsys, "eval", "--model", str(pol), "--links", "1",
                              "--duration-s", "1", "--json")
        _one_line_error(code, err, "policy.npz", "weight 'mean/bias' is invalid",
                        "NaN or infinite", "allowed: finite weights")
        assert out == ""
        with pytest.raises(deploy.PolicyError, match="'mean/bias' is invalid: 1 of its"):
            deploy.load(pol)


def test_json_output_writes_non_finite_numbers_as_null(capsys, monkeypatch):
    from ccjax import jsonout, models

    card = {"x": math.nan, "y": [np.float32(np.inf), -math.inf, 1.5], "z": np.array([np.nan])}
    monkeypatch.setattr(models, "shipped_models",
                        lambda: {"m": types.SimpleNamespace(card=card)})
    code, out, _ = _run(capsys, "models", "--json")

    def refuse(token: str) -> None:
        raise AssertionError(f"{token} is not JSON")

    assert code == 0
    assert json.loads(out, parse_constant=refuse) == {"m": {"x": None, "y": [None, None, 1.5],
                                                            "z": [None]}}
    assert jsonout.dumps({"a": np.float64("nan"), "b": (1, math.inf)}) == \
        '{"a": null, "b": [1, null]}'


# -- 7. --set env.preference beside --preference ---------------------------------------------------
def test_set_preference_is_checked_and_refused_beside_a_different_preference(capsys, no_run,
                                                                             tmp_path):
    from ccjax.cli import _overrides, build_parser

    base = ["train", "--out", str(tmp_path / "r"), "--schedule", "fixed", "--iters", "1"]
    code, _, err = _run(capsys, *base, "--set", "env.preference=[1,0]", "--preference",
                        "0.8,0.1,0.1")
    _one_line_error(code, err, "--set env.preference=[1, 0] is invalid", "3 numbers")
    code, _, err = _run(capsys, *base, "--set", "env.preference=[0.5,0.25,0.25]",
                        "--preference", "0.8,0.1,0.1")
    _one_line_error(code, err, "two preferences", "drop --set env.preference")
    # the same preference twice says one thing and is taken
    args = build_parser().parse_args([*base, "--set", "env.preference=[0.8,0.1,0.1]",
                                      "--preference", "0.8,0.1,0.1"])
    assert _overrides(args)["env.preference"] == [0.8, 0.1, 0.1]


# -- 8. --scenario given a folder or a trace -------------------------------------------------------
def test_scenario_given_a_folder_or_a_trace_says_what_it_is(capsys, no_run, tmp_path,
                                                            monkeypatch):
    trace = tmp_path / "lte.trace"
    trace.write_text("0\n1\n")
    monkeypatch.chdir(tmp_path)
    for s, words in ((str(tmp_path), ["it is a folder"]), ("lte.trace", ["mahimahi trace",
                                                                          "--trace PATH"]),
                     (str(trace), ["mahimahi trace"])):
        for argv in (["simulate", "--scenario", s], ["eval", "--cc", "cubic", "--scenario", s]):
            code, _, err = _run(capsys, *argv)
            line = _one_line_error(code, err, f"scenario={s!r} is invalid", *words,
                                   "`ccjax scenarios`", ".toml")
            assert "no such preset" not in line


# -- every loader, random bytes and random documents: ConfigError or a result, nothing else -------
def _toml_str(s: str) -> str:
    # JSON's string escapes are TOML's basic-string escapes, but for DEL, which TOML escapes
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007F")


def _toml_value(v: Any) -> str:
    """A tiny TOML writer (none is installed): tables inline, so any nesting is one line."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        r = repr(v)
        return r if "." in r or "e" in r else r + ".0"
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_toml_str(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


def _dumps(doc: dict[str, Any]) -> str:
    return "".join(f"{_toml_str(k)} = {_toml_value(v)}\n" for k, v in doc.items())


_LEAVES = (st.booleans() | st.integers(-2**63, 2**63 - 1) | st.integers(-3, 40) | st.floats()
           | st.sampled_from([0.0, -1.0, 1e-9, 1e39, 1e300])
           | st.text(max_size=6) | st.sampled_from(["fluid", "packet", "steps", "trace",
                                                    "poisson", "ppo-mocc", "mocc", "fixed"]))
_VALUES = st.recursive(_LEAVES, lambda c: st.lists(c, max_size=3)
                       | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=6)


def _keys(d: Any, pre: tuple = ()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield (*pre, k)
            yield from _keys(v, (*pre, k))


@st.composite
def _mutated(draw, bases: list[dict[str, Any]]) -> dict[str, Any]:
    """A valid document (a shipped preset) with one to three keys set to random values,
    removed or added: deeper than a random document, which fails at its first key."""
    doc = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(1, 3))):
        keys = list(_keys(doc))
        if not keys:
            break
        *parents, last = draw(st.sampled_from(keys))
        table = doc
        for k in parents:
            table = table[k]
        op = draw(st.sampled_from(["set", "remove", "add"]))
        if op == "set":
            table[last] = draw(_VALUES)
        elif op == "remove":
            del table[last]
        else:
            table[draw(st.text(max_size=5))] = draw(_VALUES)
    return doc


def _presets(kind: str) -> list[dict[str, Any]]:
    from ccjax.presets import presets_dir, read_toml

    return [read_toml(p) for p in sorted(presets_dir(kind).glob("*.toml"))]


_SWEEP = {"name": "t", "algo": "ppo-mocc", "axes": {"seed": [0, 1]},
          "set": {"train": {"schedule": "fixed", "iters": 2, "n_envs": 8, "n_steps": 4},
                  "env": {"preference": [0.45, 0.35, 0.2]}}}


def _loaders() -> dict[str, Any]:
    """Each loader's Python entry point, as the CLI calls it (a scenario is also sampled, as
    `simulate --scenario` does next)."""
    from ccjax.algos import load_algo
    from ccjax.presets import read_toml
    from ccjax.sim.scenario import load_scenario
    from ccjax.sweep.spec import load_spec

    return {"read_toml": read_toml, "scenario": lambda p: load_scenario(p).sample(0, 1),
            "algo": load_algo, "sweep": load_spec}


def _only_config_errors(path: Path, data: bytes, which: list[str] | None = None) -> None:
    path.write_bytes(data)
    for name, load in _loaders().items():
        if which is None or name in which:
            try:
                load(path)
            except ConfigError as e:
                assert "\n" not in str(e), (name, str(e))


_PROPERTY = settings(max_examples=200, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@_PROPERTY
@given(data=st.binary(max_size=80) | st.text(max_size=40).map(str.encode))
def test_loaders_fed_random_bytes_raise_only_config_errors(tmp_path, data):
    _only_config_errors(tmp_path / "doc.toml", data)


@_PROPERTY
@given(doc=st.dictionaries(st.text(max_size=6) | st.sampled_from(["algo", "link", "agent",
                                                                   "duration_s", "axes"]),
                           _VALUES, max_size=4))
def test_loaders_fed_random_toml_documents_raise_only_config_errors(tmp_path, doc):
    _only_config_errors(tmp_path / "doc.toml", _dumps(doc).encode())


@_PROPERTY
@given(doc=_mutated(_presets("sims")))
def test_scenarios_a_value_off_raise_only_config_errors(tmp_path, doc):
    _only_config_errors(tmp_path / "doc.toml", _dumps(doc).encode(), ["scenario"])


@_PROPERTY
@given(doc=_mutated(_presets("algos")))
def test_algorithm_presets_a_value_off_raise_only_config_errors(tmp_path, doc):
    _only_config_errors(tmp_path / "doc.toml", _dumps(doc).encode(), ["algo"])


@_PROPERTY
@given(doc=_mutated([_SWEEP]))
def test_sweep_specs_a_value_off_raise_only_config_errors(tmp_path, doc):
    _only_config_errors(tmp_path / "doc.toml", _dumps(doc).encode(), ["sweep"])
