"""Ship a trained policy inside the package: copy a run's ``policy/`` to ``ccjax/models/NAME/``,
set the preference it runs at by default, evaluate it beside classic controllers on held-out
links and write its card (``model.json``: ``ccjax.models``).

The shipped ``mocc`` was made with (2-core CPU; see its card for the machine and times):

    ccjax train --algo ppo-mocc --schedule all-at-once --set train.max_cycles=3 --seed 0 \
        --out runs/ship-mocc
    python scripts/ship_model.py --run runs/ship-mocc --name mocc \
        --command "ccjax train --algo ppo-mocc --schedule all-at-once --set train.max_cycles=3 \
--seed 0 --out runs/ship-mocc"

The shipped ``auto`` (AUTO, scored on ``auto-satellite`` at two of its preferences):

    ccjax train --algo auto --set train.iters=2000 --seed 0 --out runs/auto
    python scripts/ship_model.py --run runs/auto --name auto --preference 0.5,0.5 \
        --scenario auto-satellite --links 2 --score-preference 0.3,0.7 \
        --score-preference 0.7,0.3 --summary "..." --command "..."

Rerun the second command alone (``--rescore``) to refresh the card's scores after a simulator
change without retraining; ``tests/test_models.py`` holds the card's scores to the code.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
from pathlib import Path

from ccjax.agents.export import META_FILE, PARAMS_FILE
from ccjax.models import CARD_FILE, MODELS_DIR

#: the held-out evaluation every card reports (MOCC's test range, the issue 4 preferences)
SCORE_SCENARIO = "mocc-test"
SCORE_LINKS = 10
SCORE_SEED = 0
SCORE_PREFERENCES = ((0.8, 0.1, 0.1), (0.1, 0.8, 0.1))
SCORE_CLASSIC = ("bbr", "cubic")


def _fmt(w) -> str:
    return ",".join(f"{x:g}" for x in w)


def score(name: str, preferences=SCORE_PREFERENCES, classic=SCORE_CLASSIC,
          scenario: str = SCORE_SCENARIO, links: int = SCORE_LINKS, seed: int = SCORE_SEED
          ) -> dict:
    """The card's ``scores``: the shipped model and ``classic`` on the same ``links`` links of
    ``scenario``, once per preference (the classic rows' rewards are scored with it)."""
    from ccjax.evaluate import evaluate

    rows, cmds = [], []
    for w in preferences:
        res = evaluate([name, *classic], scenario, links, seed=seed, preference=list(w))
        cmds.append(f"ccjax eval --model {name} --cc {','.join(classic)} --scenario {scenario} "
                    f"--links {links} --seed {seed} --preference {_fmt(w)}")
        for r in res.rows:
            rows.append({"preference": list(w), "method": r["method"],
                         **{k: float(r[k]) for k in ("utilization", "latency_ratio",
                                                     "p95_delay_ms", "loss_rate", "reward",
                                                     "throughput_mbps")}})
    return {"command": "; ".join(cmds), "scenario": scenario, "links": links, "seed": seed,
            "model": "packet", "rows": rows}


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()}-core {cpu}, JAX on the CPU"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", help="the training run directory (its policy/ is shipped)")
    ap.add_argument("--name", required=True)
    ap.add_argument("--preference", default="0.8,0.1,0.1",
                    help="the preference the model runs at unless told otherwise")
    ap.add_argument("--command", action="append", default=[],
                    help="a command that made the run (repeatable)")
    ap.add_argument("--summary", default="PPO-MOCC, 36 landmarks trained all at once on "
                    "mocc-train (fluid model); one policy for any preference w_thr,w_lat,w_loss")
    ap.add_argument("--scenario", default=SCORE_SCENARIO, help="the card's held-out links")
    ap.add_argument("--links", type=int, default=SCORE_LINKS)
    ap.add_argument("--score-preference", action="append", default=[],
                    help="a preference the card scores at (repeatable; default MOCC's two)")
    ap.add_argument("--classic", default=",".join(SCORE_CLASSIC))
    ap.add_argument("--rescore", action="store_true",
                    help="only recompute the scores of an already shipped model")
    a = ap.parse_args(argv)
    dest = MODELS_DIR / a.name
    if a.rescore:
        card = json.loads((dest / CARD_FILE).read_text())
    else:
        if not a.run or not a.command:
            ap.error("--run and --command are needed unless --rescore")
        run = Path(a.run)
        pref = [float(x) for x in a.preference.split(",")]
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run / "policy" / PARAMS_FILE, dest / PARAMS_FILE)
        meta = json.loads((run / "policy" / META_FILE).read_text())
        meta["preference"] = pref
        (dest / META_FILE).write_text(json.dumps(meta, indent=1) + "\n")
        summary = json.loads((run / "summary.json").read_text())
        card = {"name": a.name, "algo": meta["algo"], "summary": a.summary,
                "commands": a.command, "preference": pref,
                "trained": {"date": datetime.date.today().isoformat(), "machine": _machine(),
                            "train_s": summary["train_wall_s"],
                            **{k: summary[k] for k in ("iterations", "compile_s_this_session",
                                                       "eval_wall_s", "n_envs", "best_eval",
                                                       "best_iteration", "evals", "backend")}},
                "scores": {}}
        (dest / CARD_FILE).write_text(json.dumps(card, indent=1) + "\n")  # now it resolves
    if a.rescore:
        old = card["scores"]
        prefs = list(dict.fromkeys(tuple(r["preference"]) for r in old["rows"]))
        classic = tuple(dict.fromkeys(r["method"] for r in old["rows"]
                                      if r["method"] != a.name))
        card["scores"] = score(a.name, prefs, classic, old["scenario"], old["links"],
                               old["seed"])
    else:
        prefs = ([tuple(float(x) for x in w.split(",")) for w in a.score_preference]
                 or SCORE_PREFERENCES)
        card["scores"] = score(a.name, prefs, tuple(a.classic.split(",")), a.scenario,
                               a.links)
    (dest / CARD_FILE).write_text(json.dumps(card, indent=1) + "\n")
    print(json.dumps(card["scores"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
