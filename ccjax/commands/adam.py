"""``ccjax adam``: AUTO's preference adaptation model (AdaM, AUTO §4; ``ccjax.agents.auto_adapt``).

* ``ccjax adam train --run RUN --out DIR``: label links of the run's training scenario with the
  expert (Eq. 18) and the KL rule (Eq. 22), train AdaM on them and report its accuracy on links
  it was not trained on (drawn with another seed);
* ``ccjax adam choose --run RUN --adam DIR --scenario NAME``: AUTO's Algorithm 2 on links of a
  scenario: 10 MIs under w~ = (0.3, 0.7), AdaM's chosen w per link, beside the expert's label.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ccjax import jsonout
from ccjax.errors import ConfigError, require


def add_adam(sub: Any) -> None:
    p = sub.add_parser("adam", help="AUTO's preference adaptation model (AdaM): train, choose",
                       description="AUTO §4: a classifier that reads a flow's first 10 MIs "
                       "under w=(0.3,0.7) and picks the preference under which the trained AUTO "
                       "policy behaves most like a capacity-aware expert.")
    s = p.add_subparsers(dest="adam_command", required=True)
    t = s.add_parser("train", help="label links, train AdaM, report held-out accuracy")
    t.add_argument("--run", required=True, help="an AUTO `ccjax train` directory")
    t.add_argument("--out", required=True, help="where AdaM and its report are written")
    t.add_argument("--scenario", help="links to label (default: the run's training scenario)")
    t.add_argument("--links", type=int, default=1024, help="training links (default 1024)")
    t.add_argument("--test-links", type=int, default=256, help="held-out links (default 256)")
    t.add_argument("--seed", type=int, default=0)
    c = s.add_parser("choose", help="AUTO Algorithm 2 on links of a scenario")
    c.add_argument("--run", required=True, help="an AUTO `ccjax train` directory")
    c.add_argument("--adam", required=True, help="a directory written by `ccjax adam train`")
    c.add_argument("--scenario", required=True)
    c.add_argument("--links", type=int, default=8, help="links drawn (default 8)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--json", action="store_true")


def load_auto_run(run: str) -> tuple[Any, Any, Any]:
    """(config, setup, the run's best agent state) of an AUTO training run."""
    import jax

    from ccjax.algos import agent_kind
    from ccjax.train import load_run
    from ccjax.train.setup import build
    from ccjax.train.store import CheckpointDamaged, Checkpoints

    cfg, seed, _ = load_run(run)
    require(agent_kind(cfg.agent) == "envelope", "run", run,
            "an AUTO run (agent.kind envelope)")
    s = build(cfg, seed)
    d = Path(run) / "best"
    if not d.is_dir():
        d = Path(run) / "checkpoints"
    ck = Checkpoints(d)
    try:
        if ck.latest() is None:
            raise ConfigError(f"run={run!r} is invalid: it has no checkpoint")
        state, _ = ck.restore(s.agent.init(jax.random.PRNGKey(0), s.env.spec, s.hyper))
    except CheckpointDamaged as e:
        raise ConfigError(f"run={run!r} is invalid: its model cannot be restored ({e})"
                          ) from None
    finally:
        ck.close()
    return cfg, s, state


def _labels(cfg: Any, s: Any, state: Any, scenario: str, n: int, seed: int, acfg: Any):
    import jax

    from ccjax.agents.auto_adapt import label_data
    from ccjax.envs.build import make_single_flow
    from ccjax.train.setup import env_kwargs

    env, params = make_single_flow(scenario, pool=n, seed=seed, **env_kwargs(cfg))
    return label_data(env, params, s.agent, state, acfg, jax.random.PRNGKey(seed))


def cmd_adam(args: Any) -> int:
    from ccjax.agents.auto_adapt import AdaM, AdaMConfig, train_adam

    if args.adam_command == "train":
        for name in ("links", "test_links"):
            v = getattr(args, name)
            require(v >= 8, name.replace("_", "-"), v, "an integer >= 8")
        cfg, s, state = load_auto_run(args.run)
        scenario = args.scenario or cfg.env.get("scenario", "auto-train")
        acfg = AdaMConfig(seed=args.seed)
        train = _labels(cfg, s, state, scenario, args.links, 1000 + args.seed, acfg)
        test = _labels(cfg, s, state, scenario, args.test_links, 2000 + args.seed, acfg)
        model, losses = train_adam(train, acfg)
        acc = lambda d: float((model.predict(d.seqs) == d.labels).mean())  # noqa: E731
        major = int(np.bincount(train.labels, minlength=len(acfg.classes)).argmax())
        report = {"scenario": scenario, "train_links": args.links,
                  "test_links": args.test_links, "classes": list(acfg.classes),
                  "train_accuracy": acc(train), "test_accuracy": acc(test),
                  "majority_class": acfg.classes[major],
                  "majority_test_accuracy": float((test.labels == major).mean()),
                  "train_label_counts": np.bincount(train.labels,
                                                    minlength=len(acfg.classes)).tolist(),
                  "test_label_counts": np.bincount(test.labels,
                                                   minlength=len(acfg.classes)).tolist(),
                  "final_loss": losses[-1]}
        out = model.save(args.out)
        (out / "report.json").write_text(jsonout.dumps(report, indent=2) + "\n")
        print(f"AdaM on {scenario}: train accuracy {report['train_accuracy']:.3f} "
              f"({args.links} links), held-out accuracy {report['test_accuracy']:.3f} "
              f"({args.test_links} links; always w_t={report['majority_class']}: "
              f"{report['majority_test_accuracy']:.3f}); written to {out}")
        return 0
    cfg, s, state = load_auto_run(args.run)
    model = AdaM.load(args.adam)
    require(args.links >= 1, "links", args.links, "an integer >= 1")
    d = _labels(cfg, s, state, args.scenario, args.links, 3000 + args.seed, model.cfg)
    pred = model.predict(d.seqs)
    cls = model.cfg.classes
    rows = [{"link": i, "chosen_w": [cls[int(p)], 1 - cls[int(p)]],
             "expert_w": [cls[int(lb)], 1 - cls[int(lb)]]} for i, (p, lb)
            in enumerate(zip(pred, d.labels, strict=True))]
    accuracy = float((pred == d.labels).mean())
    if args.json:
        print(jsonout.dumps({"scenario": args.scenario, "accuracy": accuracy, "links": rows},
                            indent=2))
        return 0
    for r in rows:
        print(f"link {r['link']}: AdaM chooses w=({r['chosen_w'][0]:.1f},"
              f"{r['chosen_w'][1]:.1f}); expert's label ({r['expert_w'][0]:.1f},"
              f"{r['expert_w'][1]:.1f})")
    print(f"{args.scenario}: AdaM agrees with the expert's label on {accuracy:.0%} of "
          f"{args.links} links")
    return 0
