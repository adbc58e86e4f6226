"""``ccjax sweep --backend ray``: a sweep's batches trained on a Ray cluster, recorded here.

Nothing in this module imports Ray until a sweep asks for it (``require_ray``), so the default
backend needs nothing beyond the base install; ``pip install 'ccjax[ray]'`` adds it.

How the work is split. The batches are exactly the local backend's: each static group's
pending trials cut by ``Group.plan_batch`` (``ccjax.sweep.runner.cut_batches``). Each Ray
worker is an actor holding one GPU (``num_gpus=1``) when the cluster has GPUs, else
``ray_cpus`` CPUs (default 1: XLA's CPU backend runs a program on about one core at a time,
``ccjax.devices``); there are as many as the cluster holds, at most one per batch (and at most
``ray_workers``). A worker trains one batch at a time with the local backend's
``runner.run_batch`` and keeps each group it has built (link pool, compiled programs), so the
batches after its first of a group reuse the compiled program. The first worker also plans the
batch size (``Group.plan_batch``), so the automatic rule reads the memory of the device that
will run the batches, not the driver's.

Who writes. A worker writes nothing the driver reads: it returns each trial's
``TrialOutcome`` (curve rows, metrics, timings, and for a finished trial its exported policy
as bytes), after its finished trials' ``BatchCheckpoint`` (their states in one orbax
checkpoint, as bytes), so workers need not share the driver's filesystem. The driver alone
writes the store, with ``ccjax.sweep.record.record`` as the local backend does, and makes the
same ledger transitions: a batch's trials become ``running`` when it is sent to a worker, and
``done`` or ``failed`` only once its outcomes are on disk. So resume is the same: a killed
driver leaves the batches it had sent ``running``, and a resume trains them again; ``done`` and
``failed`` trials are never rerun; a trial that diverges fails alone, inside its batch.

A worker that dies (a lost node) is restarted once and its batch retried by Ray; a batch that
raises on a worker stops the sweep after the batches in flight are recorded, with its trials
left ``running`` for a resume (as an exception in the local backend leaves them).
"""

from __future__ import annotations

import logging
import os
import platform
from pathlib import Path
from typing import Any

from ccjax.errors import ConfigError

#: the one-line answer when Ray is missing
INSTALL_HINT = "Ray is not installed; pip install 'ccjax[ray]'"
#: a worker lost with its node is restarted this many times, and its batch retried
MAX_RESTARTS = 1


class SweepWorkerError(RuntimeError):
    """A batch raised on a Ray worker; its trials stay ``running`` and rerun on resume."""


def require_ray() -> Any:
    """The ``ray`` module, or a one-line ``ConfigError`` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"backend='ray' is invalid: {INSTALL_HINT}") from None
    return ray


class SweepWorker:
    """What runs in a Ray worker (wrapped by ``ray.remote`` when a sweep starts): the groups it
    has built, by group id, and ``run_batch`` on them."""

    def __init__(self, pool_seed: int):
        self.pool_seed = pool_seed
        self.groups: dict[str, Any] = {}

    def describe(self) -> dict[str, Any]:
        import jax

        return {"host": platform.node(), "pid": os.getpid(), "backend": jax.default_backend(),
                "devices": [str(d) for d in jax.devices()]}

    def _group(self, gid: str, cfg: Any) -> Any:
        from ccjax.sweep.batch import Group

        if gid not in self.groups:
            self.groups[gid] = Group(cfg, self.pool_seed)
        return self.groups[gid]

    def plan(self, gid: str, cfg: Any, n_trials: int, requested: int | None
             ) -> tuple[int, dict[str, Any], float]:
        """``Group.plan_batch`` here, and the seconds it spent compiling."""
        g = self._group(gid, cfg)
        size, how = g.plan_batch(n_trials, requested)
        return size, how, g.compile_s

    def run(self, gid: str, trials: list[Any], size: int, label: str, eval_every: int
            ) -> dict[str, Any]:
        """One batch: its outcomes in the order they came, its record, its log lines."""
        from ccjax.sweep.runner import run_batch

        outcomes: list[Any] = []
        lines: list[str] = []
        g = self._group(gid, trials[0].cfg)
        rec = run_batch(g, trials, size, label, eval_every, outcomes.append, None, lines.append)
        rec["worker"] = f"{platform.node()}:{os.getpid()}"
        return {"outcomes": outcomes, "rec": rec, "log": lines}


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def _get(ray: Any, refs: Any, doing: str) -> Any:
    """``ray.get``, a failure named as what the sweep was doing (no trial is running yet)."""
    try:
        return ray.get(refs)
    except Exception as e:  # noqa: BLE001 - a worker that cannot start or plan
        raise SweepWorkerError(f"{doing} failed on a Ray worker ({_first_line(e)}); is ccjax "
                               "installed on every node?") from e


def _connect(ray: Any, address: str | None) -> bool:
    """Connect to ``address``, or start a local instance; reuse a connection the caller made.
    True if this call started it (and so must shut it down)."""
    if ray.is_initialized():
        return False
    kw: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    if address is None:
        kw["include_dashboard"] = False
    try:
        ray.init(address=address, **kw)
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"ray_address={address!r} is invalid: Ray could not connect "
                          f"({first})") from None
    return True


def worker_options(resources: dict[str, float], cpus: float) -> tuple[dict[str, Any], int, str]:
    """(actor options, how many workers the cluster holds, a description): one GPU each where
    the cluster has GPUs, else ``cpus`` CPUs each."""
    gpus = int(resources.get("GPU", 0))
    if gpus >= 1:
        return {"num_gpus": 1}, gpus, "1 GPU each"
    n = int(resources.get("CPU", 0) // cpus)
    if n < 1:
        raise ConfigError(f"ray_cpus={cpus!r} is invalid: the Ray cluster has "
                          f"{resources.get('CPU', 0):g} CPU(s) and no GPU, too few for one "
                          "worker")
    return {"num_cpus": cpus}, n, f"{cpus:g} CPU(s) each"


def run(spec: Any, pending: dict[str, list[Any]], requested: int | None, ledger: Any, out: Path,
        bar: Any, say: Any, callback: Any, *, address: str | None = None,
        max_workers: int | None = None, cpus: float = 1.0
        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """The Ray backend of ``run_sweep``: ``pending`` trials by group, trained on Ray workers
    and recorded into ``ledger`` / ``out`` here. Returns (batch records, group plans, where
    they ran)."""
    from ccjax.sweep.record import TrialOutcome, record
    from ccjax.sweep.runner import begin_batch, cut_batches, plan_line

    ray = require_ray()
    if not pending:
        return [], [], {"backend": "ray", "machine": "ray cluster (nothing to run)"}
    started = _connect(ray, address)
    actors: list[Any] = []
    try:
        opts, capacity, each = worker_options(ray.cluster_resources(), cpus)
        n_trials = sum(len(p) for p in pending.values())
        n_start = min(capacity, n_trials, max_workers or capacity)
        remote = ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS)(
            SweepWorker)
        actors = [remote.options(**opts).remote(spec.pool_seed) for _ in range(n_start)]

        # the batches, planned on the first worker (its device, its memory)
        queue: list[tuple[str, str, list[Any], int]] = []
        planned: list[dict[str, Any]] = []
        order = list(spec.groups())
        for gid, trials in pending.items():
            size, how, compile_s = _get(ray, actors[0].plan.remote(
                gid, trials[0].cfg, len(trials), requested), f"planning group {gid}")
            say(plan_line(gid, order.index(gid), len(order), len(trials), size, how))
            queue += [(gid, label, part, size) for label, part in cut_batches(gid, trials, size)]
            planned.append({"group": gid, "trials": len(trials), "batch": size, "plan": how,
                            "plan_compile_s": round(compile_s, 3)})
        n_workers = min(len(actors), len(queue))
        for a in actors[n_workers:]:
            ray.kill(a)
        actors = actors[:n_workers]
        infos = _get(ray, [a.describe.remote() for a in actors], "starting the workers")
        hosts = sorted({i["host"] for i in infos})
        backend = infos[0]["backend"]
        say(f"ray: {len(queue)} batch(es) on {n_workers} worker(s), {each} "
            f"({backend}; host(s) {', '.join(hosts)})")
        bar.start_batch(f"{len(queue)} batch(es) on {n_workers} Ray worker(s)", len(queue))

        batches: list[dict[str, Any]] = []
        idle = list(actors)
        inflight: dict[Any, tuple[Any, str, list[str]]] = {}
        errors: list[tuple[str, BaseException]] = []
        while queue or inflight:
            while queue and idle and not errors:
                a = idle.pop(0)
                gid, label, part, size = queue.pop(0)
                ids = begin_batch(ledger, part, label, callback)
                inflight[a.run.remote(gid, part, size, label, spec.eval_every)] = (a, label, ids)
            if not inflight:
                break
            ready, _ = ray.wait(list(inflight), num_returns=1)
            a, label, ids = inflight.pop(ready[0])
            try:
                res = ray.get(ready[0])
            except Exception as e:  # noqa: BLE001 - any failure of the batch: stop after draining
                errors.append((label, e))
                continue
            for line in res["log"]:
                say(line)
            for o in res["outcomes"]:
                record(ledger, out, o)
                if isinstance(o, TrialOutcome):
                    bar.trial_done()
            batches.append(res["rec"])
            bar.advance(1, f"batch {label} recorded")
            if callback is not None:
                callback("end", ids)
            idle.append(a)
        if errors:
            label, e = errors[0]
            raise SweepWorkerError(
                f"batch {label} failed on a Ray worker ({_first_line(e)}); its trials stay "
                "'running' and train again on --resume") from e
        return batches, planned, {"backend": backend, "machine": f"ray cluster: {n_workers} "
                                  f"worker(s), {each}, on {', '.join(hosts)}",
                                  "workers": infos}
    finally:
        for a in actors:
            ray.kill(a)
        if started:
            ray.shutdown()
