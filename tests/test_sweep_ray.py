"""``--backend ray``: a sweep's batches on a local two-worker Ray instance, recorded by the
driver into the same store as the local backend, with the same numbers; the driver's loop
(ledger transitions, a killed driver resumed, a failed batch) against an in-process fake of
Ray; Ray optional (a one-line error without it, nothing imported by the default backend); no
Ray process left behind. Also ``ccjax bench sweep``, whose run is the local reference.

Cost: every real run here uses batches of one trial, so the module compiles one set of
programs (the one-trial chunk, evaluation and init, which the bench's one-at-a-time side needs
anyway) and every other process gets them from the shared compilation cache."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from ccjax.cli import main
from ccjax.errors import ConfigError
from ccjax.sweep import Ledger, load_spec, load_trial, read_curve, run_sweep

from .test_sweep import _write_spec

#: test_sweep's TINY trials: seed 0, 1 x lr 1e-3 and an lr that diverges, evaluated after 2
#: and 4 iterations
AXES = {"seed": [0, 1], "hyper.lr": [1e-3, 1e30]}
SWEEP = {"eval_every": 2}



def _cache_env() -> dict[str, str]:
    """The Ray workers share this session's compilation cache (tests/conftest.py)."""
    return {"JAX_COMPILATION_CACHE_DIR": jax.config.jax_compilation_cache_dir,
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.5",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def _ray_processes() -> set[int]:
    """Live processes descending from this one whose command line is Ray's (GCS, raylet,
    workers, monitors); zombies excluded."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parent[int(d.name)] = int(fields[1])
    kids, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - kids
        kids |= frontier
    out = set()
    for pid in kids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "/ray/" in cmd or cmd.startswith("ray::"):
            out.add(pid)
    return out


@pytest.fixture(scope="module")
def cluster():
    """A local Ray instance with two one-CPU workers' room, shut down after the module."""
    import ray

    cache = _cache_env()
    saved = {k: os.environ.get(k) for k in cache}
    os.environ.update(cache)  # the raylet, and so every worker, inherits them
    ctx = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                   logging_level=logging.WARNING)
    try:
        yield ctx.address_info["address"]
    finally:
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    """``ccjax bench sweep`` on the spec, its sweep directories kept; its "vmapped" side, in
    batches of one here, is the local backend's reference for Ray. Run with Ray unimportable,
    before any Ray instance starts: the default backend needs nothing from Ray."""
    d = tmp_path_factory.mktemp("raysweep")
    spec_path = _write_spec(d / "tiny.toml", AXES, SWEEP)
    saved = sys.modules.get("ray")
    sys.modules["ray"] = None  # `import ray` raises ImportError
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            code = main(["bench", "sweep", "--spec", str(spec_path), "--trials", "4", "--iters",
                         "4", "--batch", "1", "--keep", str(d / "bench"), "--json"])
    finally:
        if saved is None:
            del sys.modules["ray"]
        else:
            sys.modules["ray"] = saved
    assert code == 0
    return d, spec_path, json.loads(out.getvalue())


@pytest.fixture(scope="module")
def sweeps(local_sweep, cluster):
    """The same spec on the two-worker instance: 4 batches, 2 per worker."""
    d, spec_path, bench = local_sweep
    summary = run_sweep(spec_path, d / "ray", batch=1, backend="ray")
    return dict(spec=load_spec(spec_path), dir=d, bench=bench, summary=summary,
                final=_rows(d / "ray"), local_rows=_rows(d / "bench" / "batched"))


def _rows(out: Path) -> dict[str, dict]:
    led = Ledger(out)
    try:
        return {r["id"]: r for r in led.rows()}
    finally:
        led.close()


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@pytest.mark.slow
def test_ray_records_each_trial_once_with_the_local_numbers(sweeps):
    d, spec, final, local = sweeps["dir"], sweeps["spec"], sweeps["final"], sweeps["local_rows"]
    refdir = d / "bench" / "batched"  # the local backend's sweep directory
    ids = [t.id for t in spec.trials]
    assert sorted(final) == sorted(ids) and len(final) == 4  # each trial exactly once
    summary = sweeps["summary"]
    assert summary["executor"] == "ray" and summary["backend"] == "cpu"
    assert len(summary["workers"]) == 2  # one batch per worker at a time, on both workers
    assert sorted(b["batch"] for b in summary["batches"]) == [
        f"{spec.trials[0].group}/{i}-of-4" for i in range(1, 5)]
    assert all(b["size"] == 1 and b["trials"] == 1 for b in summary["batches"])
    assert len({b["worker"] for b in summary["batches"]}) == 2
    # the divergence isolation of the local backend: each lr=1e30 trial fails alone
    for t in spec.trials:
        row, ref = final[t.id], local[t.id]
        assert row["status"] == ("failed" if t.cfg.hyper["lr"] > 1 else "done")
        assert row["attempts"] == 1
        # the same compiled program on the same inputs and keys: the same numbers, exactly
        for col in ("status", "reason", "iterations", "reward", "utilization", "latency_ratio",
                    "loss_rate", "train_reward", "best_reward", "best_iteration", "batch",
                    "batch_size"):
            assert row[col] == ref[col], col
        assert json.loads(row["metrics"]) == json.loads(ref["metrics"])
        a = read_curve(d / "ray" / "curves" / f"{t.id}.parquet")
        b = read_curve(refdir / "curves" / f"{t.id}.parquet")
        assert len(a) == len(b) == (4 if row["status"] == "done" else 2)  # chunks of 2
        for ra, rb in zip(a, b, strict=True):
            assert ra.keys() == rb.keys()
            assert all(_same(ra[k], rb[k]) for k in ra if k != "wall_s"), (ra, rb)
        tdir = d / "ray" / "trials" / t.id
        if row["status"] == "done":
            # the worker's policy and its batch's checkpoint, written here by the driver
            assert sorted(p.name for p in tdir.iterdir()) == ["policy"]
            ref_ck = json.loads(row["metrics"])["checkpoint"]
            assert (d / "ray" / "batches" / ref_ck["batch"] / "checkpoint").is_dir()
            rdir = refdir / "trials" / t.id
            pa = np.load(tdir / "policy" / "policy.npz")
            pb = np.load(rdir / "policy" / "policy.npz")
            assert sorted(pa.files) == sorted(pb.files)
            for k in pa.files:
                np.testing.assert_array_equal(pa[k], pb[k])
            assert (json.loads((tdir / "policy" / "policy.json").read_text())
                    == json.loads((rdir / "policy" / "policy.json").read_text()))
            _, sa, prog = load_trial(d / "ray", t.id)
            _, sb, _ = load_trial(refdir, t.id)
            assert prog["trial"] == t.id and prog["best_iteration"] == row["best_iteration"]
            for x, y in zip(jax.tree.leaves(sa), jax.tree.leaves(sb), strict=True):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        else:
            assert not tdir.exists()  # a failed trial has no model
    names = sorted(p.name for p in (d / "ray" / "curves").iterdir())
    assert names == sorted(f"{i}.parquet" for i in ids)  # no temporary file left


def test_bench_sweep_json(local_sweep):
    """The bench's JSON (the fixture ran `ccjax bench sweep --json`): both sides trained the
    same 4 trials through the engine (batches of one on both sides here, so one compiled
    program serves the module, and both sides' numbers must agree exactly)."""
    d, _, out = local_sweep
    assert (out["trials"], out["iters"], out["n_envs"], out["n_steps"]) == (4, 4, 8, 4)
    b, s = out["batched"], out["sequential"]
    assert (b["batch"], b["batches"], s["batch"], s["batches"]) == (1, 4, 1, 4)
    for side in (b, s):
        assert (side["done"], side["failed"]) == (2, 2)  # lr=1e30 diverges on both sides
        for k in ("compile_s", "warmup_s", "run_s", "train_s", "eval_s", "env_steps",
                  "env_steps_per_s", "train_env_steps_per_s"):
            assert side[k] > 0, k
        assert side["compile_in_run_s"] == 0  # the warm-up batch compiled everything
        assert side["env_steps_per_s"] == pytest.approx(side["env_steps"] / side["run_s"])
        assert side["train_s"] < side["run_s"]
    assert s["env_steps"] == b["env_steps"]  # the same trials, the same program
    assert out["speedup"] == pytest.approx(s["run_s"] / b["run_s"])
    assert out["train_speedup"] == pytest.approx(s["train_s"] / b["train_s"])
    assert len(out["load_before"]) == 3 and out["machine"]["backend"] == "cpu"
    assert sorted(p.name for p in (d / "bench").iterdir()) == ["batched", "sequential"]
    a, c = _rows(d / "bench" / "batched"), _rows(d / "bench" / "sequential")
    assert {i: r["reward"] for i, r in a.items()} == {i: r["reward"] for i, r in c.items()}


def test_bench_sweep_errors_are_one_line(tmp_path, capsys):
    for argv, msg in ((["--trials", "0"], "trials=0 is invalid"),
                      (["--trials", "65"], "trials=65 is invalid: ppo-mocc-hparams has 64"),
                      (["--envs", "1"], "envs=1 is invalid"),
                      (["--set", "train.iters=5"], "set train.iters is invalid"),
                      (["--spec", "no-such-sweep"], "no-such-sweep")):
        assert main(["bench", "sweep", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and msg in err, err
    (tmp_path / "x").write_text("")
    assert main(["bench", "sweep", "--keep", str(tmp_path)]) == 2
    assert "is invalid: not empty" in capsys.readouterr().err


def test_ray_missing_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    import importlib.util

    import ccjax.sweep.ray_backend

    spec_path = _write_spec(tmp_path / "tiny.toml", AXES, SWEEP)
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    # the module imports without Ray (a fresh copy, loaded beside the imported one)
    where = importlib.util.spec_from_file_location("_rb_without_ray",
                                                   ccjax.sweep.ray_backend.__file__)
    rb = importlib.util.module_from_spec(where)
    where.loader.exec_module(rb)
    with pytest.raises(ConfigError) as e:
        rb.require_ray()
    assert "pip install 'ccjax[ray]'" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"ccjax\[ray\]"):
        run_sweep(spec_path, tmp_path / "out", backend="ray")
    assert main(["sweep", str(spec_path), "--out", str(tmp_path / "out"), "--backend",
                 "ray"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'ccjax[ray]'" in err
    assert not (tmp_path / "out").exists()  # refused before the sweep directory was made


@pytest.mark.parametrize("argv, msg", [
    (["--backend", "dask"], "backend='dask' is invalid: one of local, ray"),
    (["--ray-address", "auto"], "ray_address='auto' is invalid without backend='ray'"),
    (["--backend", "ray", "--ray-workers", "0"], "ray_workers=0 is invalid"),
    (["--backend", "ray", "--ray-cpus", "0"], "ray_cpus=0.0 is invalid"),
    (["--backend", "ray", "--ray-cpus", "nan"], "ray_cpus=nan is invalid"),
])
def test_backend_options_are_checked_first(tmp_path, capsys, argv, msg):
    spec_path = _write_spec(tmp_path / "tiny.toml", AXES, SWEEP)
    assert main(["sweep", str(spec_path), "--out", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and msg in err
    assert not (tmp_path / "out").exists()


def test_worker_resources_one_gpu_each_else_cpus():
    from ccjax.sweep.ray_backend import worker_options

    assert worker_options({"CPU": 16.0, "GPU": 4.0}, 1.0)[:2] == ({"num_gpus": 1}, 4)
    assert worker_options({"CPU": 16.0}, 1.0)[:2] == ({"num_cpus": 1.0}, 16)
    assert worker_options({"CPU": 16.0}, 3.0)[:2] == ({"num_cpus": 3.0}, 5)
    with pytest.raises(ConfigError, match="too few for one worker"):
        worker_options({"CPU": 2.0}, 4.0)


def test_model_files_round_trip_and_stay_inside(tmp_path):
    from ccjax.sweep.record import BATCH_DIRS, pack_dir, write_model_files

    src = tmp_path / "src"
    (src / "policy" / "sub").mkdir(parents=True)
    (src / "policy" / "sub" / "data").write_bytes(b"\x00\x01")
    (src / "policy" / "empty").mkdir()
    (src / "policy" / "policy.json").write_text("{}")
    files = pack_dir(src)
    assert files == {"policy/sub/data": b"\x00\x01", "policy/empty/": b"",
                     "policy/policy.json": b"{}"}
    dest = tmp_path / "trial"
    (dest / "policy").mkdir(parents=True)
    (dest / "policy" / "stale.npz").write_bytes(b"old")  # what a killed run left: replaced
    write_model_files(dest, files)
    assert pack_dir(dest) == files
    assert sorted(p.name for p in dest.iterdir()) == ["policy"]
    for bad in ("../x", "/etc/x", "other/x", "policy/../../x", "checkpoint/x"):
        with pytest.raises(ValueError, match="is invalid"):
            write_model_files(dest, {bad: b""})
    # a batch's directory takes its checkpoint and nothing else
    ck = {"checkpoint/1/state/data": b"\x00\x01", "checkpoint/empty/": b""}
    write_model_files(tmp_path / "batch", ck, BATCH_DIRS)
    assert pack_dir(tmp_path / "batch") == ck
    with pytest.raises(ValueError, match="is invalid"):
        write_model_files(tmp_path / "batch", {"policy/policy.json": b"{}"}, BATCH_DIRS)


class _FakeRay:
    """What ``ray_backend.run`` uses of Ray, in-process: actors run their calls when the driver
    asks for the result, in submission order; a batch whose label is in ``fail`` raises."""

    def __init__(self, resources: dict, fail: set[str]):
        self.resources, self.fail, self.killed, self.submitted = resources, fail, [], []

    def is_initialized(self) -> bool:
        return True

    def cluster_resources(self) -> dict:
        return self.resources

    def remote(self, **_):
        fake = self

        class Worker:
            def __init__(self, pool_seed):
                self.plan = _Method(lambda gid, cfg, n, req: (req, {"rule": "requested",
                                                                   "batch": req}, 0.0))
                self.describe = _Method(lambda: {"host": "fake", "backend": "cpu"})
                self.run = _Method(self._run)

            def _run(self, gid, trials, size, label, every):
                fake.submitted.append(label)
                if label in fake.fail:
                    raise RuntimeError(f"{label} broke\nsecond line")
                from ccjax.sweep.record import make_outcome

                outs = [make_outcome(t.id, "done", [{"iteration": 1, "reward": 0.5}], [], None,
                                     1, {"reward": 0.5, "iterations": 1}, {"train_s": 1.0})
                        for t in trials]
                return {"outcomes": outs, "rec": {"batch": label, "trials": len(trials)},
                        "log": [f"batch {label} ran"]}

        class Handle:
            def __init__(self, opts=None):
                self.opts = opts

            def options(self, **opts):
                return Handle(opts)

            def remote(self, pool_seed):
                w = Worker(pool_seed)
                w.opts = self.opts
                return w

        return lambda cls: Handle()

    def wait(self, refs, num_returns=1):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        return [r() for r in ref] if isinstance(ref, list) else ref()

    def kill(self, actor):
        self.killed.append(actor)

    def shutdown(self):
        raise AssertionError("a connection the caller made is not shut down")


class _Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        return lambda: self.fn(*args)


@pytest.mark.parametrize("fail, states", [
    # the second batch fails while the third, sent after the first came back, is recorded
    ({"2-of-3"}, ["done", "running", "done"]),
    # the first fails: nothing more is sent, the batch in flight is still recorded
    ({"1-of-3"}, ["running", "done", "pending"]),
    (set(), ["done", "done", "done"]),
])
def test_ray_driver_records_what_came_back_and_stops_on_a_failed_batch(tmp_path, monkeypatch,
                                                                      fail, states):
    from ccjax.sweep import ray_backend
    from ccjax.sweep.runner import _Bar
    from ccjax.sweep.spec import spec_from_dict

    spec = spec_from_dict({"name": "t", "algo": "ppo-mocc", "set": {"train": {
        "schedule": "fixed", "iters": 2, "n_envs": 8}}, "axes": {"seed": list(range(6))}},
        "t.toml")
    (gid, trials), = spec.groups().items()
    fake = _FakeRay({"CPU": 2.0}, {f"{gid}/{f}" for f in fail})
    monkeypatch.setattr(ray_backend, "require_ray", lambda: fake)
    led = Ledger(tmp_path)
    led.add(spec.trials)
    events, lines = [], []
    run = lambda: ray_backend.run(spec, {gid: trials}, 2, led, tmp_path, _Bar(6, False),  # noqa
                                  lines.append, lambda e, ids: events.append((e, ids)))
    if fail:
        with pytest.raises(ray_backend.SweepWorkerError) as e:
            run()
        assert f"batch {gid}/{min(fail)} failed on a Ray worker (RuntimeError: " in str(e.value)
        assert "\n" not in str(e.value) and "--resume" in str(e.value)
    else:
        batches, planned, where = run()
        assert [b["batch"] for b in batches] == [f"{gid}/{i}-of-3" for i in (1, 2, 3)]
        assert planned[0]["batch"] == 2 and where["backend"] == "cpu"
    st = led.status()
    assert [st[t.id] for t in trials[::2]] == states  # per batch of 2
    assert [st[t.id] for t in trials[1::2]] == states
    assert len(fake.submitted) == sum(s != "pending" for s in states)
    assert [e for e, _ in events].count("end") == states.count("done")
    assert len(fake.killed) == 2  # both workers, whatever happened
    for t in trials:
        if st[t.id] == "done":
            assert read_curve(tmp_path / "curves" / f"{t.id}.parquet")[0]["reward"] == 0.5
    led.close()


class _Killed(BaseException):
    """Stands for the driver's death (not an Exception, so nothing on the way catches it)."""


def test_killed_ray_driver_resumes_each_trial_once(tmp_path, monkeypatch):
    """Through ``run_sweep`` on the fake: the driver dies once its first batch is recorded,
    with the second sent to a worker and the third not yet sent; the resume trains the second
    and third once each and leaves the first alone."""
    from ccjax.sweep import ray_backend
    from ccjax.sweep.spec import spec_from_dict

    spec = spec_from_dict({"name": "t", "algo": "ppo-mocc", "set": {"train": {
        "schedule": "fixed", "iters": 2, "n_envs": 8}}, "axes": {"seed": list(range(6))}},
        "t.toml")
    fake = _FakeRay({"CPU": 2.0}, set())
    monkeypatch.setattr(ray_backend, "require_ray", lambda: fake)

    def die_after_first_batch(event, ids):
        if event == "end":
            raise _Killed

    with pytest.raises(_Killed):
        run_sweep(spec, tmp_path / "s", batch=2, backend="ray", callback=die_after_first_batch)
    killed = _rows(tmp_path / "s")
    ids = [t.id for t in spec.trials]
    assert [killed[i]["status"] for i in ids] == ["done"] * 2 + ["running"] * 2 + ["pending"] * 2
    summary = run_sweep(spec, tmp_path / "s", batch=2, resume=True, backend="ray")
    final = _rows(tmp_path / "s")
    assert len(final) == 6 and all(r["status"] == "done" for r in final.values())
    assert [final[i]["attempts"] for i in ids] == [1, 1, 2, 2, 1, 1]
    assert all(final[i]["ended"] == killed[i]["ended"] for i in ids[:2])  # not rerun
    assert [b["trials"] for b in summary["batches"]] == [2, 2]
    assert summary["done"] == 6 and summary["executor"] == "ray"
    again = run_sweep(spec, tmp_path / "s", resume=True, backend="ray")
    assert again["batches"] == [] and _rows(tmp_path / "s") == final


@pytest.mark.slow
def test_no_ray_process_left_behind(cluster, sweeps):
    """Last in the module: shutting the instance down leaves none of its processes (GCS,
    raylet, workers, the killed driver's workers included)."""
    import ray

    procs = _ray_processes()
    assert len(procs) >= 2  # at least the GCS and the raylet, started by this process
    ray.shutdown()
    deadline = time.monotonic() + 20
    while (left := procs & _ray_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left
