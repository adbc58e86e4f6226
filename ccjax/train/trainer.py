"""The training loop: a schedule's segments as compiled chunks, with metrics, evaluations,
checkpoints and resume (DESIGN principle 3).

Each chunk is one jitted call doing ``chunk`` PPO iterations (``ccjax.agents.drivers``); between
chunks the loop writes metric rows, advances the progress bar and checkpoints. Compilation is
ahead of time (``lower().compile()``) and timed on its own, so ``summary.json`` reports compile
time and training wall time separately.

A checkpoint holds everything the run's future depends on: the agent state (with a replay
buffer where the agent has one), the environments' runner (simulator states, observations, the
actions of MIs in flight, the random key), the schedule position and the evaluations so far.
On ``resume`` the newest intact checkpoint is restored (a damaged newer one is reported and
skipped) and the run continues at the next iteration exactly as the uninterrupted run would:
killed anywhere, a run makes the same rows and the same model. Rows a killed run wrote after
its checkpoint are dropped and redone; rows missing before it (a file cut short or deleted) are
refused, never left as a gap. What resume found and where it continues is logged.
"""

from __future__ import annotations

import json
import platform
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ccjax.agents.drivers import compile_chunk, init_runner
from ccjax.dirlock import DirLock
from ccjax.errors import ConfigError
from ccjax.train.schedules import Segment
from ccjax.train.setup import Evaluator, Setup
from ccjax.train.store import Checkpoints, CsvLog, check_out_dir, write_json

#: metrics.csv's columns before the agent's own metrics (``agent.metric_names``)
ROLLOUT_FIELDS = ["iteration", "phase", "cycle", "label", "wall_s", "reward", "reward_current",
                  "reward_replay", "utilization", "latency_ratio", "loss_rate",
                  "episode_return", "valid_frac"]
#: PPO's columns, as every PPO run's metrics.csv has them
METRIC_FIELDS = ROLLOUT_FIELDS + ["policy_loss", "value_loss", "entropy", "approx_kl",
                                  "clip_frac", "ent_coef", "std", "lr"]


def eval_fields(objective_names: tuple[str, ...]) -> list[str]:
    """eval.csv's columns: one ``w_<objective>`` per preference weight."""
    return (["iteration", "phase", "cycle", "wall_s"] + [f"w_{n}" for n in objective_names]
            + ["reward", "utilization", "latency_ratio", "loss_rate"])


EVAL_FIELDS = eval_fields(("thr", "lat", "loss"))


#: the ``meta`` entries a resumed run must share with the run it continues (an adaptation's)
RESUME_META = ("from", "preference", "replay", "iters")


#: what ``--restart`` removes from a run's folder before the run starts over
RUN_RECORDS = ("checkpoints", "best", "policy", "metrics.csv", "eval.csv", "summary.json",
               "progress.json")


def check_out(out: str | Path, resume: bool, restart: bool = False) -> None:
    """One-line ``ConfigError`` unless ``out`` fits: a folder (``store.check_out_dir``: not
    empty, not a file) with no run in it, or, with ``resume`` or ``restart``, one."""
    check_out_dir(out)
    if resume and restart:
        raise ConfigError("--resume and --restart cannot be combined: --resume continues the "
                          "run, --restart starts it over")
    cfg_path = Path(out) / "config.json"
    if cfg_path.exists() and not (resume or restart):
        raise ConfigError(f"out={str(out)!r} is invalid: it holds a run already; pass "
                          "--resume to continue it (or --restart to start it over) or choose "
                          "a new directory")
    flag = "--restart" if restart else "--resume"
    if (resume or restart) and not cfg_path.exists():
        raise ConfigError(f"out={str(out)!r} is invalid for {flag}: no config.json there")


def read_config(path: Path) -> dict[str, Any]:
    """A run's config.json, or a one-line ``ConfigError`` naming it when it is not one (a
    file cut short or overwritten)."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0]
        raise ConfigError(f"{str(path)!r} is invalid: not a readable run config ({why})"
                          ) from None
    if not (isinstance(raw, dict) and isinstance(raw.get("algo"), dict)
            and "name" in raw["algo"]):
        raise ConfigError(f"{str(path)!r} is invalid: not a run config (no algo table)")
    return raw


def _differences(old: Any, new: Any, key: str) -> list[str]:
    """The dotted keys under ``key`` whose values differ, with both values (``old`` there,
    ``new`` now): a table's own keys, not the whole table."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in list(old) + [k for k in new if k not in old]:
            out += _differences(old.get(k), new.get(k), f"{key}.{k}" if key else k)
        return out
    return [] if old == new else [f"{key} differs ({old!r} there, {new!r} now)"]


def check_resume(out: str | Path, mine: dict[str, Any]) -> None:
    """One-line ``ConfigError`` unless ``mine`` (what the run would write as its config.json)
    continues the run in ``out``: the same config, seed and schedule, and an adaptation's
    source, preference, replay and length (``RESUME_META``). Checked before anything is built,
    and again under the run's lock; the error names every key that differs."""
    old = read_config(Path(out) / "config.json")
    mine = json.loads(json.dumps(mine, default=str))
    a, b = old.get("algo") or {}, mine.get("algo") or {}
    # a config's tables are named as --set names them (train.n_envs); the record of the
    # overrides only where the values they set are the same (a flag given once, not the other)
    diff = _differences({k: v for k, v in a.items() if k != "overrides"},
                        {k: v for k, v in b.items() if k != "overrides"}, "")
    diff = diff or _differences(a.get("overrides"), b.get("overrides"), "overrides")
    diff += _differences(old.get("seed"), mine.get("seed"), "seed")
    diff += _differences(old.get("schedule"), mine.get("schedule"), "schedule")
    # an adaptation's source, preference, replay and length (a train run has none)
    was, now = old.get("meta") or {}, mine.get("meta") or {}
    diff += [d for k in RESUME_META if k in was for d in _differences(was.get(k), now.get(k), k)]
    if diff:
        more = f" and {len(diff) - 4} more" if len(diff) > 4 else ""
        raise ConfigError(f"--resume is invalid: {', '.join(diff[:4])}{more} from the run in "
                          f"{str(out)!r}; resume with the same arguments")


def check_state(out: str | Path) -> None:
    """For ``--resume``, before anything is built: one-line ``ConfigError`` when the run in
    ``out`` recorded a checkpoint (progress.json) but its checkpoints, or the metric files its
    checkpoints count rows of, are gone. (A checkpoint cut or emptied is found when it is
    read, and the one before it is used.)"""
    d = Path(out)
    if _read_progress(d / "progress.json") is None:
        return  # stopped before its first checkpoint: it starts anew, and says so
    ck = d / "checkpoints"
    steps = [p for p in ck.iterdir() if p.is_dir() and p.name.isdigit()] if ck.is_dir() else []
    if not steps:
        raise ConfigError(f"--resume is invalid: the run in {str(out)!r} checkpointed but every "
                          f"checkpoint is missing ({ck} holds none); restore them, or pass "
                          "--restart to start the run over")
    for name in ("metrics.csv", "eval.csv"):
        if not (d / name).is_file():
            raise ConfigError(f"--resume is invalid: {name} in {str(out)!r} is missing: rows "
                              "before the checkpoint were lost (the file was cut or deleted); "
                              "restore it, or pass --restart to start the run over")


def check_max_iters(max_iters: int | None) -> None:
    if max_iters is not None and (isinstance(max_iters, bool) or not isinstance(max_iters, int)
                                  or max_iters < 1):
        raise ConfigError(f"max_iters={max_iters!r} is invalid: an integer >= 1 (or omit it to "
                          "run to the end)")


class Trainer:
    """Runs ``schedule`` on ``setup`` into ``out``.

    ``init_state``: start from this agent state (adaptation) instead of a fresh one.
    ``meta``: extra JSON recorded in config.json (e.g. where an adaptation started from).
    """

    def __init__(self, setup: Setup, schedule: Any, out: str | Path, *, resume: bool = False,
                 restart: bool = False, init_state: Any = None,
                 meta: dict[str, Any] | None = None, progress: bool = True,
                 log: Callable[[str], None] | None = None):
        self.setup, self.schedule, self.out = setup, schedule, Path(out)
        self.resume, self.restart = resume, restart
        self.init_state, self.progress = init_state, progress
        self.meta = dict(meta or {})
        self.log = log or (lambda s: None)
        t = setup.cfg.train
        self.chunk = t.get("chunk", 10)
        self.ckpt_every = t.get("checkpoint_every", 50)
        self._compiled: dict[int, Any] = {}
        self.compile_s = 0.0

    # -- run directory -------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        return {"algo": self.setup.cfg.to_dict(), "seed": self.setup.seed,
                "schedule": type(self.schedule).__name__, "meta": self.meta}

    def _open(self) -> None:
        out = self.out
        cfg_path = out / "config.json"
        check_out(out, self.resume, self.restart)
        out.mkdir(parents=True, exist_ok=True)
        mine = json.loads(json.dumps(self._config(), default=str))
        if self.resume or self.restart:
            check_resume(out, mine)
        if self.restart:
            gone = [n for n in RUN_RECORDS if (out / n).exists()]
            for n in gone:
                p = out / n
                shutil.rmtree(p) if p.is_dir() else p.unlink()
            self.log(f"restarting {out}: removed {', '.join(gone) or 'nothing'}; starting at "
                     "iteration 0")
        if not self.resume:
            write_json(cfg_path, mine)
        self.metric_names = list(self.setup.agent.metric_names)
        fields = ROLLOUT_FIELDS + self.metric_names
        efields = eval_fields(self.setup.env.spec.objective_names)
        if self.resume:
            for name, want in (("metrics.csv", fields), ("eval.csv", efields)):
                _check_header(out / name, want)
        self.metrics = CsvLog(out / "metrics.csv", fields)
        self.evals = CsvLog(out / "eval.csv", efields)
        self.ckpt = Checkpoints(out / "checkpoints")

    # -- compiled pieces -----------------------------------------------------------------------
    def _chunk_fn(self, n: int, args: tuple) -> Any:
        """(compiled chunk of n iterations, argument placer); ``train.shard`` splits the
        environments over all devices (``compile_chunk``)."""
        if n not in self._compiled:
            s = self.setup
            t0 = time.perf_counter()
            self._compiled[n] = compile_chunk(s.venv, s.agent, s.cfg.train.get("n_steps", 32),
                                              n, *args, shard=s.cfg.train.get("shard", False))
            self.compile_s += time.perf_counter() - t0
        return self._compiled[n]

    # -- the loop --------------------------------------------------------------------------------
    def run(self, max_iters: int | None = None) -> dict[str, Any]:
        # One process per run directory (``ccjax.dirlock``). ``train`` and ``adapt`` checked
        # max_iters and the folder before they built anything; ``_open`` checks the folder
        # again under the lock.
        with DirLock(self.out, "training run"):
            return self._run(max_iters)

    def _run(self, max_iters: int | None) -> dict[str, Any]:
        s = self.setup
        self._open()
        key = jax.random.PRNGKey(s.seed)
        state = self.init_state
        if state is None:
            # jitted, as the runner below: run op by op they were hundreds of small programs,
            # each compiled at every start (seconds), where one program is one cache entry
            state = jax.jit(lambda k: s.agent.init(k, s.env.spec, s.hyper))(
                jax.random.fold_in(key, 0))
        make_runner = jax.jit(lambda st, p, k: init_runner(s.venv, s.agent, st, p, k))
        prog: dict[str, Any] = {"iteration": 0, "segment": 0, "seg_iter": 0, "evals": [],
                                "wall_s": 0.0, "eval_s": 0.0, "metric_rows": 0, "eval_rows": 0,
                                "valid_steps": 0.0, "done": False}
        runner = None
        if self.resume:  # a runner of the right shapes is the restore's target
            target = make_runner(state, self._params(), jax.random.fold_in(key, 1))
            state, runner, prog = self._resume(state, target, prog, make_runner)
        if prog["iteration"] == 0:
            # a new run (or an adaptation, which starts at its source's iteration) anneals over
            # its own planned length; a resumed one keeps the schedule its checkpoint holds
            state = s.agent.plan_run(state, s.cfg.train, int(state.iteration),
                                     getattr(self.schedule, "max_iters", 0))
        eval_prefs = np.asarray(self.schedule.eval_prefs, np.float32)
        t = s.cfg.train
        evaluator = Evaluator(s, len(eval_prefs), t.get("eval_links", 8), t.get("eval_steps", 200))
        total = getattr(self.schedule, "max_iters", None)
        bar = _Bar(total, prog["iteration"], self.progress)
        params = self._params()
        if runner is None:  # a new run's environments (or a resumed run that had no checkpoint)
            runner = make_runner(state, params, jax.random.fold_in(key, 1))
        last_ckpt = prog["iteration"]
        try:
            if (getattr(self.schedule, "eval_at_start", False) and prog["iteration"] == 0
                    and self.evals.rows == 0):
                # the reference point of adaptation curves: the model before any update
                self._evaluate(evaluator, state, eval_prefs, prog, "start", 0)
            while not prog["done"]:
                seg: Segment | None = self.schedule.segment(prog["segment"], prog["evals"])
                if seg is None or (max_iters is not None and prog["iteration"] >= max_iters):
                    prog["done"] = seg is None
                    break
                while prog["seg_iter"] < seg.n_iters:
                    n = min(self.chunk, seg.n_iters - prog["seg_iter"])
                    if max_iters is not None:
                        n = min(n, max_iters - prog["iteration"])
                        if n <= 0:
                            break
                    prefs = jnp.asarray(np.stack([seg.prefs(prog["seg_iter"] + i)
                                                  for i in range(n)]))
                    args = (state, runner, params, prefs)
                    fn, place = self._chunk_fn(n, args)
                    t1 = time.perf_counter()
                    state, runner, (m, st) = fn(*place(args))
                    jax.block_until_ready(state)
                    dt = time.perf_counter() - t1
                    prog["wall_s"] += dt
                    rows = self._rows(seg, prog, m, st, dt, n)
                    self.metrics.append(rows)
                    prog["valid_steps"] += float(np.sum(np.asarray(st.valid_steps)))
                    prog["iteration"] += n
                    prog["seg_iter"] += n
                    bar.update(n, rows[-1])
                    if prog["iteration"] - last_ckpt >= self.ckpt_every:
                        self._save(state, runner, prog)
                        last_ckpt = prog["iteration"]
                if prog["seg_iter"] < seg.n_iters:
                    break  # max_iters reached mid-segment
                new_best = False
                if seg.evaluate:
                    r = self._evaluate(evaluator, state, eval_prefs, prog, seg.phase, seg.cycle)
                    # landmark schedules judge convergence on the mean over the landmarks;
                    # a fixed preference on its own reward (the first evaluated preference)
                    prog["evals"].append(float(r[0] if seg.phase in ("fixed", "adapt")
                                               else r.mean()))
                    self.log(f"iter {prog['iteration']} {seg.phase} cycle {seg.cycle}: "
                             f"eval reward {prog['evals'][-1]:.4f}")
                    if prog["evals"][-1] > prog.get("best", -np.inf):
                        # policy/ holds the best evaluated model, not merely the last
                        prog["best"], prog["best_iteration"] = prog["evals"][-1], prog["iteration"]
                        new_best = True
                prog["segment"] += 1
                prog["seg_iter"] = 0
                self._save(state, runner, prog)
                last_ckpt = prog["iteration"]
                if new_best:
                    # exported after the checkpoint that records it: a run killed in between
                    # resumes from that checkpoint and exports it then (``_mend_export``), so
                    # best/ and policy/ never hold a model the run's records do not
                    self._export(state, prog)
            self._save(state, runner, prog)
        finally:
            bar.close()
        self.state = state
        summary = self._summary(prog, eval_prefs)
        if prog["done"] and "best_iteration" not in prog:
            self._export(state, prog)
        write_json(self.out / "summary.json", summary)
        self.ckpt.close()
        return summary

    def _evaluate(self, evaluator: Evaluator, state: Any, eval_prefs: np.ndarray,
                  prog: dict[str, Any], phase: str, cycle: int) -> np.ndarray:
        t1 = time.perf_counter()
        res = evaluator(state, eval_prefs)
        prog["eval_s"] += time.perf_counter() - t1
        names = self.setup.env.spec.objective_names
        self.evals.append([
            dict(iteration=prog["iteration"], phase=phase, cycle=cycle, wall_s=prog["wall_s"],
                 **{f"w_{n}": float(w[j]) for j, n in enumerate(names)},
                 reward=float(res["reward"][i]), utilization=float(res["utilization"][i]),
                 latency_ratio=float(res["latency_ratio"][i]),
                 loss_rate=float(res["loss_rate"][i]))
            for i, w in enumerate(eval_prefs)])
        return res["reward"]

    def _params(self) -> Any:
        params = self.setup.params
        if getattr(self.schedule, "draw_per_episode", False):
            params = params.replace(pref_draw=jnp.ones((), bool))  # AUTO: one w per episode
        return params

    def _save(self, state: Any, runner: Any, prog: dict[str, Any]) -> None:
        prog["metric_rows"], prog["eval_rows"] = self.metrics.rows, self.evals.rows
        self.ckpt.save(prog["iteration"], state, prog, runner=runner)
        # outside checkpoints/: that the run has checkpointed, so a resume that finds no
        # checkpoint knows they were lost rather than never written
        write_json(self.out / "progress.json",
                   {"checkpoint_iteration": prog["iteration"], "done": prog["done"],
                    "metric_rows": prog["metric_rows"], "eval_rows": prog["eval_rows"],
                    "kept": self.ckpt.steps()})

    def _resume(self, state: Any, runner: Any, prog: dict[str, Any], make_runner: Any
                ) -> tuple[Any, Any, dict[str, Any]]:
        """The newest intact checkpoint's (state, runner, progress), with the CSVs cut to what
        it recorded (runner None where the run had no checkpoint yet: it starts anew); logs
        what was found. ``ConfigError`` where continuing would lose work
        silently: checkpoints recorded but none intact, or rows missing before the one
        resumed from."""
        out, flag = self.out, "pass --restart to start the run over"
        rec = _read_progress(out / "progress.json")
        step, trees, got, damaged = self.ckpt.restore_intact({"state": state, "runner": runner})
        for bad, why in damaged:
            self.log(f"checkpoint at iteration {bad} is damaged ({why}); skipped")
        if step is None:
            if rec is not None or damaged:
                what = ("damaged" if damaged else
                        f"missing ({out / 'checkpoints'} holds none)")
                raise ConfigError(
                    f"--resume is invalid: the run in {str(out)!r} checkpointed iteration "
                    f"{(rec or {}).get('checkpoint_iteration', '?')} but every checkpoint is "
                    f"{what}; restore them, or {flag}")
            self.log(f"resuming {out}: no checkpoint was written before it stopped; starting "
                     f"at iteration 0 (dropping {self.metrics.rows} metric and "
                     f"{self.evals.rows} evaluation rows)")
            self.metrics.truncate(0)
            self.evals.truncate(0)
            return state, None, prog
        for log, name, key in ((self.metrics, "metrics.csv", "metric_rows"),
                               (self.evals, "eval.csv", "eval_rows")):
            if log.rows < got[key]:
                raise ConfigError(
                    f"--resume is invalid: {name} in {str(out)!r} has {log.rows} rows but the "
                    f"checkpoint at iteration {step} recorded {got[key]}: rows before it were "
                    f"lost (the file was cut or deleted); restore it, or {flag}")
        dropped = (self.metrics.rows - got["metric_rows"], self.evals.rows - got["eval_rows"])
        self.metrics.truncate(got["metric_rows"])
        self.evals.truncate(got["eval_rows"])
        how = "bit for bit"
        if "runner" in trees:
            runner = trees["runner"]
        else:  # a checkpoint of a run started before runners were saved
            how = "with fresh environments (its checkpoint has no runner state)"
            runner = make_runner(trees["state"], self._params(), jax.random.fold_in(
                jax.random.PRNGKey(self.setup.seed), 1 + got["iteration"]))
        fell = f", the newest intact of {len(damaged) + 1}" if damaged else ""
        self.log(f"resuming {out} at iteration {step}{fell} {how}: dropping {dropped[0]} "
                 f"metric and {dropped[1]} evaluation rows written after it")
        self._mend_export(trees["state"], got)
        return trees["state"], runner, got

    def _rows(self, seg: Segment, prog: dict[str, Any], m: Any, st: Any, dt: float,
              n: int) -> list[dict[str, Any]]:
        stn = {k: np.asarray(getattr(st, k)) for k in ("reward", "utilization", "latency_ratio",
                                                       "loss_rate", "episode_return",
                                                       "valid_steps", "env_reward",
                                                       "env_valid")}
        n_envs = self.setup.venv.n
        steps = self.setup.cfg.train.get("n_steps", 32)
        rows = []
        for i in range(n):
            er, ev = stn["env_reward"][i], stn["env_valid"][i]
            row = dict(iteration=prog["iteration"] + i + 1, phase=seg.phase, cycle=seg.cycle,
                       label=seg.label, wall_s=prog["wall_s"] - dt * (n - 1 - i) / n,
                       valid_frac=float(stn["valid_steps"][i]) / (n_envs * steps))
            for k in ("reward", "utilization", "latency_ratio", "loss_rate", "episode_return"):
                row[k] = float(stn[k][i])
            if seg.n_current:
                c = seg.n_current
                row["reward_current"] = float(er[:c].sum() / max(ev[:c].sum(), 1.0))
                row["reward_replay"] = float(er[c:].sum() / max(ev[c:].sum(), 1.0))
            else:
                row["reward_current"] = row["reward"]
            for k in self.metric_names:
                row[k] = float(getattr(m, k)[i])
            rows.append(row)
        return rows

    def _summary(self, prog: dict[str, Any], eval_prefs: np.ndarray) -> dict[str, Any]:
        rows = self.evals.read()
        last = [_typed(r) for r in rows if r["iteration"] == rows[-1]["iteration"]] if rows else []
        return {"iterations": prog["iteration"], "done": prog["done"],
                "train_wall_s": round(prog["wall_s"], 3), "eval_wall_s": round(prog["eval_s"], 3),
                "compile_s_this_session": round(self.compile_s, 3),
                "valid_env_steps": prog["valid_steps"],
                "valid_env_steps_per_s": prog["valid_steps"] / max(prog["wall_s"], 1e-9),
                "evals": prog["evals"], "best_eval": prog.get("best"),
                "best_iteration": prog.get("best_iteration"), "n_envs": self.setup.venv.n,
                "backend": jax.default_backend(), "devices": len(jax.devices()),
                "machine": platform.platform(),
                "final_eval": last}

    def _mend_export(self, state: Any, prog: dict[str, Any]) -> None:
        """After a resume: if the checkpoint resumed from is the best evaluation and best/ does
        not hold it (the run was killed between the checkpoint and the export), export it."""
        if prog.get("best_iteration") != prog["iteration"]:
            return
        best = self.out / "best"
        have = None
        if best.is_dir():
            ck = Checkpoints(best, keep=1)
            try:
                have = ck.latest()
            finally:
                ck.close()
        if have != prog["iteration"] or not (self.out / "policy").is_dir():
            self._export(state, prog)

    def _export(self, state: Any, prog: dict[str, Any]) -> None:
        """policy/ (the actor, for deployment and evaluation) and best/ (the whole learner
        state, from which ``ccjax adapt`` continues: MOCC adapts the trained model, and a run
        may have degraded after its best evaluation)."""
        from ccjax.agents.export import save_policy

        best = Checkpoints(self.out / "best", keep=1)
        try:
            best.save(int(prog["iteration"]), state,
                      {"iteration": int(prog["iteration"]), "eval": prog.get("best")})
        finally:
            best.close()
        s = self.setup
        pref = getattr(self.schedule, "preference", None) if s.agent.pref_dim else None
        save_policy(self.out / "policy", s.agent, s.agent.actor_params(state), s.env, s.params,
                    algo=s.cfg.name, preference=None if pref is None else list(pref))


def _typed(row: dict[str, str]) -> dict[str, Any]:
    """A CSV row's numbers as numbers (the phase stays a string)."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        try:
            out[k] = int(v) if k in ("iteration", "cycle") else float(v)
        except (TypeError, ValueError):
            out[k] = v
    return out


def _read_progress(path: Path) -> dict[str, Any] | None:
    """progress.json (written after each checkpoint), or None where there is none; an
    unreadable one counts as present (the run did checkpoint)."""
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
        return raw if isinstance(raw, dict) else {}
    except (OSError, ValueError):
        return {}


def _check_header(path: Path, fields: list[str]) -> None:
    """``ConfigError`` unless the CSV at ``path`` (where it exists) starts with ``fields``."""
    if not path.exists():
        return
    with open(path, newline="") as fh:
        head = fh.readline().rstrip("\r\n")
    if head != ",".join(fields):
        raise ConfigError(f"--resume is invalid: {str(path)!r} does not start with the run's "
                          f"header ({head[:60]!r}...); restore it, or pass --restart to start "
                          "the run over")


class _Bar:
    """A rich progress bar over iterations (silent when disabled or not a terminal)."""

    def __init__(self, total: int | None, done: int, enabled: bool):
        self.p = None
        if not enabled:
            return
        from ccjax.progress import make_progress

        self.p = make_progress("train")
        self.p.start()
        self.task = self.p.add_task("train", total=total, completed=done, info="")

    def update(self, n: int, row: dict[str, Any]) -> None:
        if self.p is not None:
            info = (f"{row['phase']} {row['label']} reward {row['reward']:.3f} "
                    f"util {row['utilization']:.2f}")
            self.p.update(self.task, advance=n, info=info)

    def close(self) -> None:
        if self.p is not None:
            self.p.stop()
