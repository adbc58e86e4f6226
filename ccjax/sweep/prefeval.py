"""Preference evaluation of a sweep's trials (MOCC §6.1, Fig. 6 and 16): every finished trial's
exported policy on N preferences drawn uniformly from the simplex x M links of a scenario, and
classic controllers on the same links, scored with the same preferences. Failed trials and
degenerate ones (``ccjax.sweep.runner.degenerate``) have no policy worth a point on a front and
are not evaluated.

Spec: an optional ``[prefeval]`` table in a sweep TOML (every key optional; defaults shown)::

    [prefeval]
    preferences = 100          # N, drawn uniformly from the simplex (Dirichlet(1, 1, 1))
    scenario = "mocc-test"     # the links' scenario (preset name or TOML path)
    links = 10                 # M links sampled from it
    seed = 0                   # the links and the preferences (below)
    duration_s = 30.0          # simulated seconds per link (default: the scenario's)
    model = "packet"           # simulator model: packet | fluid
    tick_ms = 1.0              # simulator tick
    init_rate_frac = 0.5       # a policy's initial rate, fraction of the link's capacity
    classic = ["bbr", "copa", "cubic", "vegas", "vivace"]   # controllers evaluated once
    max_links = 0              # simulated links per compiled program (0: a trial's whole grid)

``ccjax sweep`` runs it after training; ``ccjax prefeval SWEEP_DIR`` runs or resumes it alone.

The sets. Link ``l`` is ``Scenario.sample(seed, M)[l]`` with the PRNG key ``ccjax eval --seed
seed`` gives it; the preferences are ``numpy.random.default_rng([seed, 1]).dirichlet((1, 1,
1), N)`` (a stream apart from the links'). Both are the same for every trial and every
controller, so rows compare like with like. MOCC leaves open how its 100 objectives and 10
networks were drawn (notes/mocc.md, Fig. 6); uniform on the simplex is what "uniformly
distributed objectives" says.

The evaluation. A trial's N x M grid is one batched program (``ccjax.evaluate.
evaluate_preferences``): the links tiled once per preference, each preference a per-link
parameter of the policy. A classic controller sends the same whatever the preference, so it runs
once on the M links and each link's totals are scored with every preference (MOCC Eq. 2, w^T O
from the run's totals, as ``ccjax eval`` scores). Metrics as ``ccjax.evaluate`` defines them.

Storage, under ``SWEEP_DIR/prefeval/``::

    spec.json                 what was evaluated: the keys above with duration_s resolved, the
                              preference values, the links' parameters, the classic
                              controllers evaluated so far, the column list, format version
    <trial_id>.parquet        one row per (preference, link)
    classic/<name>.parquet    the same rows for a classic controller

Columns (every file): ``pref`` (int, 0..N-1), ``w_thr``, ``w_lat``, ``w_loss``, ``link`` (int,
0..M-1), ``reward``, ``utilization``, ``latency_ratio``, ``loss_rate``, ``throughput_mbps``,
``p95_delay_ms``, ``mean_rtt_ms``, ``base_rtt_ms``, ``rtt_floor_ms`` (the least RTT a data packet
sees: the propagation RTT and its transmission; what ``latency_ratio`` divides by),
``capacity_mbps``, ``link_utilization``,
``buffer_pkts``, ``random_loss``, ``tick_s`` (float64; the tick the method ran at, the spec's
``tick_ms`` or finer for Copa, ``ccjax.sim.resolution``) and ``method`` (the trial id or
controller name). Results of an older format version are refused (remove them to evaluate
afresh).

Resume. Each file is written to a temporary name and renamed (``ledger.write_curve``); a killed
evaluation leaves whole files or none, and the next run skips every trial and controller whose
file exists. spec.json is written before any result; a later run whose settings differ from it
(other than ``classic`` and ``max_links``, which change no row) is refused with a one-line
error, since its rows would not compare with the ones on disk.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from ccjax.errors import ConfigError

#: 2: every row records the tick its method ran at (``tick_s``; Copa runs finer than the
#: spec's tick since commit 3130bb6, ``ccjax.sim.resolution``), and results of version 1 are
#: refused (their Copa rows were made at the spec's tick)
#: 3: RTTs carry the packet's transmission at the bottleneck and latency ratios divide by the
#: least RTT a data packet sees, ``rtt_floor_ms`` (``ccjax.sim.core.rtt_correction_ticks``);
#: rows of version 2 had neither and are refused
FORMAT_VERSION = 3
DIRNAME = "prefeval"
SPEC_FILE = "spec.json"
DEFAULT_CLASSIC = ("bbr", "copa", "cubic", "vegas", "vivace")
#: the columns of every result file, in order
COLUMNS = ("pref", "w_thr", "w_lat", "w_loss", "link", "reward", "utilization", "latency_ratio",
           "loss_rate", "throughput_mbps", "p95_delay_ms", "mean_rtt_ms", "base_rtt_ms",
           "rtt_floor_ms", "capacity_mbps", "link_utilization", "buffer_pkts", "random_loss",
           "tick_s", "method")
#: settings that change the rows: a stored evaluation and a new request must agree on these
MATCH_KEYS = ("preferences", "scenario", "links", "seed", "duration_s", "model", "tick_ms",
              "init_rate_frac", "version")
_ALLOWED = {
    "preferences": "an integer >= 1 (preferences drawn uniformly from the simplex)",
    "scenario": "a scenario preset name or a TOML path",
    "links": "an integer >= 1 (links sampled from the scenario)",
    "seed": "an integer >= 0",
    "duration_s": "a number of simulated seconds > 0",
    "model": "packet or fluid",
    "tick_ms": "a simulator tick from 0.001 to 1000 ms",
    "init_rate_frac": "a number > 0 (a policy's initial rate, fraction of capacity)",
    "classic": "a list of controller names",
    "max_links": "an integer >= 0 (0: a trial's whole grid in one program)",
}


@dataclass(frozen=True)
class PrefevalSpec:
    """What to evaluate (the ``[prefeval]`` table; see the module doc)."""

    preferences: int = 100
    scenario: str = "mocc-test"
    links: int = 10
    seed: int = 0
    duration_s: float | None = None  # None: the scenario's
    model: str = "packet"
    tick_ms: float = 1.0
    init_rate_frac: float = 0.5
    classic: tuple[str, ...] = DEFAULT_CLASSIC
    max_links: int = 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["classic"] = list(self.classic)
        return d


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def parse_prefeval(table: Any, where: str = "[prefeval]",
                   base: PrefevalSpec | None = None,
                   flags: dict[str, str] | None = None) -> PrefevalSpec:
    """Validate a ``[prefeval]`` table (or CLI overrides) on top of ``base`` (default: the
    defaults); every bad value is a one-line ``ConfigError`` naming the key and what is allowed.
    ``flags`` maps a key to the command-line flag that gave it (``ccjax prefeval``'s), which
    its error then names instead of ``prefeval.KEY in WHERE``. The scenario and controller
    names are resolved here, before anything is traced."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} is invalid: a table of key = value "
                          f"({', '.join(_ALLOWED)})")

    def invalid(k: str, v: Any, allowed: str) -> ConfigError:
        """The error for key ``k`` holding ``v``: named by the flag that gave it, else by the
        key and the place that gave it (a value from ``base`` was given elsewhere)."""
        if flags and k in flags and k in table:
            return ConfigError(f"{flags[k]}={v!r} is invalid: {allowed}")
        return ConfigError(f"prefeval.{k}={v!r} is invalid"
                           + (f" in {where}" if k in table else "") + f": {allowed}")

    known = {f.name for f in fields(PrefevalSpec)}
    vals: dict[str, Any] = {}
    for k, v in table.items():
        if k not in known:
            raise ConfigError(f"prefeval.{k} is invalid in {where}: unknown key; allowed: "
                              f"{', '.join(_ALLOWED)}")
        ok = {
            "preferences": _is_int(v) and v >= 1,
            "scenario": isinstance(v, str) and bool(v),
            "links": _is_int(v) and v >= 1,
            "seed": _is_int(v) and v >= 0,
            "duration_s": v is None or (_is_num(v) and v > 0),
            "model": v in ("packet", "fluid"),
            "tick_ms": _is_num(v) and 1e-3 <= v <= 1e3,
            "init_rate_frac": _is_num(v) and v > 0,
            "classic": isinstance(v, list | tuple) and all(isinstance(x, str) for x in v),
            "max_links": _is_int(v) and v >= 0,
        }[k]
        if not ok:
            raise invalid(k, v, _ALLOWED[k])
        vals[k] = tuple(v) if k == "classic" else (float(v) if k in (
            "duration_s", "tick_ms", "init_rate_frac") and v is not None else v)
    spec = replace(base or PrefevalSpec(), **vals)
    from ccjax.cc.registry import CONTROLLERS

    for c in spec.classic:
        if c not in CONTROLLERS:
            raise invalid("classic", list(spec.classic), f"{c!r} is not a controller; known: "
                          f"{', '.join(sorted(CONTROLLERS))}")
    if len(set(spec.classic)) != len(spec.classic):
        raise invalid("classic", list(spec.classic), "a controller is named twice")
    from ccjax.sim.scenario import load_scenario
    from ccjax.units import ticks_problem

    sc = load_scenario(spec.scenario)  # an unknown scenario: its own one-line ConfigError
    # a run lasts whole ticks of tick_ms, the tick every method runs at (or finer, for Copa:
    # ccjax.sim.resolution); a duration between them would be rounded silently
    dur = spec.duration_s if spec.duration_s is not None else sc.duration_s
    why = ticks_problem(dur, spec.tick_ms, f"prefeval.tick_ms = {spec.tick_ms:g} ms")
    if why is not None and spec.duration_s is None:
        raise ConfigError(f"prefeval.duration_s={dur!r} (scenario {spec.scenario!r}'s, none "
                          f"given) is invalid: {why}; give a duration_s that is")
    if why is not None:
        raise invalid("duration_s", dur, why)
    return spec


def preference_set(n: int, seed: int) -> np.ndarray:
    """The ``n`` preferences (n, 3), uniform on the simplex: Dirichlet(1, 1, 1) from
    ``numpy.random.default_rng([seed, 1])``. float64; each row sums to 1 within 1e-15."""
    if not (_is_int(n) and n >= 1) or not (_is_int(seed) and seed >= 0):
        raise ConfigError(f"preferences={n!r}, seed={seed!r} is invalid: integers, n >= 1 and "
                          "seed >= 0")
    w = np.random.default_rng([seed, 1]).dirichlet(np.ones(3), n)
    return w / w.sum(axis=1, keepdims=True)


def _resolved(spec: PrefevalSpec) -> dict[str, Any]:
    """spec.json's settings: the spec with the duration resolved and the sets it implies."""
    from ccjax.sim.scenario import load_scenario

    sc = load_scenario(spec.scenario)
    dur = float(spec.duration_s if spec.duration_s is not None else sc.duration_s)
    links = sc.sample(spec.seed, spec.links)
    return {**spec.to_json(), "duration_s": dur, "scenario_name": sc.name,
            "preference_values": preference_set(spec.preferences, spec.seed).tolist(),
            "link_values": [{"bandwidth_mbps": _bw(s), "rtt_ms": list(map(float, s.rtt_ms)),
                             "buffer_pkts": float(s.buffer_pkts), "loss": float(s.loss)}
                            for s in links],
            "columns": list(COLUMNS), "version": FORMAT_VERSION}


def _bw(link: Any) -> Any:
    """A link's bandwidth for spec.json: the schedule's values (Mbps), or the trace's name."""
    if link.trace is not None:
        return str(link.trace_name)
    return [float(x) for x in link.bandwidth_mbps]


def prefeval_dir(sweep_dir: str | os.PathLike[str]) -> Path:
    return Path(sweep_dir) / DIRNAME


def read_spec(sweep_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    p = prefeval_dir(sweep_dir) / SPEC_FILE
    if not p.is_file():
        return None
    try:
        spec = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        why = " ".join(str(e).split()) or type(e).__name__
        raise ConfigError(f"{str(p)!r} is invalid: not a readable preference-evaluation spec "
                          f"({why}); remove the folder {str(p.parent)!r} to evaluate again"
                          ) from None
    if not isinstance(spec, dict):
        raise ConfigError(f"{str(p)!r} is invalid: not a preference-evaluation spec (a JSON "
                          "object)")
    return spec


def _check_match(old: dict[str, Any], new: dict[str, Any], where: Path) -> None:
    for k in MATCH_KEYS:
        if old.get(k) != new.get(k):
            raise ConfigError(
                f"prefeval {k}={new.get(k)!r} is invalid for {str(where)!r}: its results were "
                f"made with {k}={old.get(k)!r}; evaluate with the same settings, or remove "
                f"{str(where)!r} to start a new evaluation")


def check_prefeval(sweep_dir: str | os.PathLike[str], spec: PrefevalSpec) -> None:
    """One-line ``ConfigError`` if ``sweep_dir`` holds preference-evaluation results made with
    other settings than ``spec``'s: a resumed sweep checks it before it trains, not after."""
    old = read_spec(sweep_dir)
    if old is not None:
        _check_match(old, _resolved(spec), prefeval_dir(sweep_dir))


def spec_for(sweep_dir: str | os.PathLike[str],
             overrides: dict[str, Any] | None = None,
             flags: dict[str, str] | None = None) -> PrefevalSpec:
    """The evaluation a sweep directory asks for: its stored ``prefeval/spec.json`` if any,
    else the ``[prefeval]`` table of its spec (``sweep.json``), else the defaults (MOCC Fig. 6:
    100 preferences x 10 mocc-test links, packet model); ``overrides`` (CLI flags) on top,
    ``flags`` naming the flag of each (``parse_prefeval``)."""
    d = Path(sweep_dir)
    stored = read_spec(d)
    if stored is not None:
        base = parse_prefeval({k: stored[k] for k in _ALLOWED if k in stored},
                              f"{d / DIRNAME / SPEC_FILE}")
    else:
        table = None
        sj = d / "sweep.json"
        if sj.is_file():
            table = json.loads(sj.read_text()).get("prefeval")
        base = parse_prefeval(table, f"{sj}") if table else PrefevalSpec()
    # an override's error names its flag (``flags``, the CLI's) or says it is an override
    return (parse_prefeval(overrides, "overrides", base, flags) if overrides else base)


def _write_json(path: Path, obj: Any) -> None:
    from ccjax.train.store import write_json

    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, obj)


def _rows(grid: Any, method: str) -> list[dict[str, Any]]:
    out = []
    for r in grid.rows:
        row = {c: r.get(c) for c in COLUMNS}
        row["method"] = method
        row["tick_s"] = grid.tick_s
        for c in ("pref", "link"):
            row[c] = int(row[c])
        for c in COLUMNS[1:]:
            if c not in ("link", "method") and row[c] is not None:
                row[c] = float(row[c])
        out.append(row)
    return out


def evaluable(rows: list[dict[str, Any]], trials: Sequence[str] | None = None) -> list[str]:
    """The ids of the ledger rows a preference evaluation takes (of ``trials``, if given):
    finished ones, less the degenerate (their policy collapsed: ``ccjax.sweep.runner.
    degenerate``), left out as failed ones are: their points would stand on the fronts, and be
    picked as the best trial, as if a controller had made them."""
    return [r["id"] for r in rows if r["status"] == "done" and not r.get("degenerate")
            and (trials is None or r["id"] in trials)]


def run_prefeval(sweep_dir: str | os.PathLike[str], spec: PrefevalSpec | None = None, *,
                 trials: Sequence[str] | None = None,
                 log: Callable[[str], None] | None = None,
                 progress: bool = False) -> dict[str, Any]:
    """Evaluate (or resume evaluating) the finished trials of ``sweep_dir`` and the classic
    controllers, into ``sweep_dir/prefeval/`` (module doc). ``spec`` defaults to
    ``spec_for(sweep_dir)``; ``trials`` restricts the trials (ids). Returns a summary: the
    settings, the trials and controllers evaluated now and those skipped, timings."""
    from ccjax.evaluate import evaluate_preferences, resolve_method
    from ccjax.sweep.ledger import Ledger, write_curve

    d = Path(sweep_dir)
    say = log or (lambda s: None)
    ledger = Ledger.existing(d)
    try:
        rows = ledger.rows()
    finally:
        ledger.close()
    spec = spec or spec_for(d)
    if not isinstance(spec, PrefevalSpec):
        raise ConfigError(f"spec={spec!r} is invalid: a PrefevalSpec (or None for the sweep's)")
    known = [r["id"] for r in rows]
    if trials is not None:
        bad = [t for t in trials if t not in known]
        if bad:
            raise ConfigError(f"trial={bad[0]!r} is invalid: not a trial of {str(d)!r} "
                              f"({len(known)} trials)")
    done = evaluable(rows, trials)
    pdir = prefeval_dir(d)
    want = _resolved(spec)
    old = read_spec(d)
    if old is not None:
        _check_match(old, want, pdir)
        want["classic"] = list(dict.fromkeys(list(old.get("classic", [])) + list(spec.classic)))
    want["created"] = (old or {}).get("created", time.time())
    _write_json(pdir / SPEC_FILE, want)  # before any result, so a resume can check it

    W = np.asarray(want["preference_values"], np.float64)
    kw = dict(scenario=spec.scenario, links=spec.links, seed=spec.seed,
              duration_s=want["duration_s"], model=spec.model, tick_s=spec.tick_ms * 1e-3,
              init_rate_frac=spec.init_rate_frac, max_links=spec.max_links or None)
    todo_c = [c for c in spec.classic if not (pdir / "classic" / f"{c}.parquet").is_file()]
    todo_t = [t for t in done if not (pdir / f"{t}.parquet").is_file()]
    for t in todo_t:
        if not (d / "trials" / t / "policy" / "policy.json").is_file():
            raise ConfigError(f"trial={t!r} is invalid: it is done but has no exported policy "
                              f"in {str(d / 'trials' / t / 'policy')!r}")
    say(f"prefeval {d}: {spec.preferences} preferences x {spec.links} {spec.scenario} links "
        f"({want['duration_s']:g} s, {spec.model} model): {len(todo_t)} trial(s) and "
        f"{len(todo_c)} controller(s) to evaluate, {len(done) - len(todo_t)} trial(s) and "
        f"{len(spec.classic) - len(todo_c)} controller(s) already done")
    bar = _Bar(len(todo_t) + len(todo_c), progress)
    timings: dict[str, dict[str, float]] = {}
    try:
        for kind, names in (("classic", todo_c), ("trial", todo_t)):
            for name in names:
                t0 = time.perf_counter()
                if kind == "classic":
                    method = resolve_method(name, kind="controller")
                    path = pdir / "classic" / f"{name}.parquet"
                else:
                    # every row sets its own preference; W[0] only stands in for a policy
                    # trained on landmarks, which stores none (as `ccjax train` exports it)
                    method = resolve_method(d / "trials" / name / "policy", W[0],
                                            kind="policy")
                    path = pdir / f"{name}.parquet"
                grid = evaluate_preferences(method, W, **kw)
                write_curve(path, _rows(grid, name))
                wall = time.perf_counter() - t0
                timings[name] = {"wall_s": wall, "compile_s": grid.compile_s,
                                 "run_s": grid.run_s, "simulated_links": grid.simulated}
                mean = float(np.mean([r["reward"] for r in grid.rows]))
                say(f"prefeval {kind} {name}: {grid.simulated} simulated links in "
                    f"{grid.programs} program(s), compile {grid.compile_s:.1f} s, run "
                    f"{grid.run_s:.1f} s; mean reward {mean:.4f}")
                bar.advance(name)
    finally:
        bar.close()
    return {"dir": str(pdir), "settings": {k: want[k] for k in MATCH_KEYS},
            "trials_evaluated": todo_t, "trials_skipped": [t for t in done if t not in todo_t],
            "classic_evaluated": todo_c,
            "classic_skipped": [c for c in spec.classic if c not in todo_c],
            "timings": timings}


class _Bar:
    """rich progress over the methods to evaluate."""

    def __init__(self, total: int, enabled: bool):
        self.p = None
        if not enabled or total == 0:
            return
        from ccjax.progress import make_progress

        self.p = make_progress()
        self.p.start()
        self.task = self.p.add_task("prefeval", total=total, info="")

    def advance(self, name: str) -> None:
        if self.p is not None:
            self.p.update(self.task, advance=1, info=name)

    def close(self) -> None:
        if self.p is not None:
            self.p.stop()


def read_results(sweep_dir: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any],
                                                             dict[str, Any]]:
    """(spec.json, {trial id: columns}, {controller: columns}) of a sweep's preference
    evaluation, each file's columns as numpy arrays. ``ConfigError`` when there is none, or
    when a file cannot be read."""
    from ccjax.sweep.ledger import read_parquet

    d = Path(sweep_dir)
    if not d.is_dir():
        raise ConfigError(f"sweep_dir={str(d)!r} is invalid: no such directory")
    pdir = prefeval_dir(d)
    spec = read_spec(d)
    files = sorted(pdir.glob("*.parquet")) if pdir.is_dir() else []
    if spec is None or not files:
        raise ConfigError(f"sweep_dir={str(d)!r} is invalid: no preference evaluation results "
                          f"in {str(pdir)!r}; run `ccjax prefeval {d}` first")

    def cols(p: Path) -> dict[str, np.ndarray]:
        t = read_parquet(p, "preference evaluation")
        return {c: t.column(c).to_numpy() for c in t.column_names}

    trials = {p.stem: cols(p) for p in files}
    classic = {p.stem: cols(p) for p in sorted((pdir / "classic").glob("*.parquet"))}
    return spec, trials, classic
