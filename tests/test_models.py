"""The models shipped inside the package (``ccjax.models``): listed by ``ccjax models``, usable
by name wherever a controller or a policy directory is, and their cards' scores held to the
code."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

from ccjax import deploy
from ccjax.cli import main
from ccjax.models import CARD_FIELDS, MODELS_DIR, shipped_model, shipped_models


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_mocc_ships_with_a_card_and_loads_without_jax_and_with_it():
    models = shipped_models()
    assert "mocc" in models
    m = models["mocc"]
    for key, typ in CARD_FIELDS.items():
        assert isinstance(m.card[key], typ), key
    # small enough to ship in the package: a few tens of kB
    assert sum(p.stat().st_size for p in m.path.iterdir()) < 100_000
    pol = deploy.load("mocc")  # the NumPy deployment finds it by name
    assert pol.meta["preference"] == m.card["preference"]
    from ccjax.cc.policy import load_policy_controller

    pc = load_policy_controller(m.path)
    assert pc.preference == tuple(m.card["preference"])
    assert shipped_model("cubic") is None and shipped_model("../mocc") is None


def test_models_command_lists_each_model_with_its_training_and_scores(capsys):
    code, out, _ = _run(capsys, "models")
    assert code == 0
    models = shipped_models()
    assert {"mocc", "auto"} <= set(models)
    for name, m in models.items():  # each one's entry, its commands, its scores
        assert f"\n{name}: " in "\n" + out
        for cmd in m.card["commands"]:
            assert cmd in out
    assert "utilization" in out and "bbr" in out and "cubic" in out
    code, out, _ = _run(capsys, "models", "--json")
    assert code == 0 and all(json.loads(out)[n] == m.card for n, m in models.items())


def test_eval_takes_a_shipped_model_by_name(capsys):
    code, out, err = _run(capsys, "eval", "--model", "mocc", "--cc", "bbr,cubic", "--links", "1",
                          "--duration-s", "2", "--json")
    assert code == 0, err
    rows = {r["method"]: r for r in json.loads(out)["rows"]}
    assert set(rows) == {"mocc", "bbr", "cubic"}
    assert rows["mocc"]["kind"] == "policy"
    assert rows["mocc"]["preference"] == shipped_models()["mocc"].card["preference"]
    # --cc takes it too, at a given preference
    code, out, err = _run(capsys, "eval", "--cc", "mocc", "--links", "1", "--duration-s", "2",
                          "--preference", "0.1,0.8,0.1", "--json")
    assert code == 0, err
    assert json.loads(out)["rows"][0]["preference"] == [0.1, 0.8, 0.1]


def test_simulate_runs_a_shipped_model_beside_cubic(capsys):
    code, out, err = _run(capsys, "simulate", "--cc", "mocc,cubic", "--flows", "2",
                          "--duration-s", "3", "--start-s", "0,0", "--json")
    assert code == 0, err
    flows = json.loads(out)["flows"]
    assert [f["cc"] for f in flows] == ["mocc", "cubic"]
    assert all(f["throughput_mbps"] > 0.5 for f in flows)
    # the preference moves the policy's flow: latency-heavy keeps less queued than throughput
    delays = {}
    for w in ("0.8,0.1,0.1", "0.1,0.8,0.1"):
        code, out, err = _run(capsys, "simulate", "--cc", "mocc", "--flows", "1",
                              "--duration-s", "5", "--preference", w, "--json")
        assert code == 0, err
        delays[w] = json.loads(out)["flows"][0]["mean_rtt_ms"]
    assert delays["0.1,0.8,0.1"] < delays["0.8,0.1,0.1"]


def test_a_policy_directory_and_a_copy_of_a_model_work_by_path(capsys, tmp_path):
    d = tmp_path / "mine"
    shutil.copytree(MODELS_DIR / "mocc", d)
    code, out, err = _run(capsys, "simulate", "--cc", str(d), "--flows", "1", "--duration-s",
                          "1", "--json")
    assert code == 0, err
    assert json.loads(out)["flows"][0]["cc"] == str(d)


@pytest.mark.parametrize("argv,words", [
    (["simulate", "--cc", "moc", "--flows", "1"], ["cc='moc'", "shipped models are auto, mocc",
                                                    "cubic"]),
    (["simulate", "--cc", "cubic", "--preference", "0.8,0.1,0.1"], ["preference", "no flow"]),
    (["simulate", "--cc", "mocc", "--preference", "0.8,0.1"], ["preference"]),
    (["eval", "--model", "nothing-here"], ["model='nothing-here'", "mocc"]),
    (["eval", "--cc", "moc"], ["cc='moc'", "shipped models are auto, mocc"]),
])
def test_unknown_names_and_stray_preferences_are_one_line(capsys, argv, words):
    code, _, err = _run(capsys, *argv)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ccjax: error:"), err
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.mark.slow
def test_each_cards_scores_are_what_the_code_measures():
    """The card's table is rerun as ``scripts/ship_model.py --rescore`` runs it: a simulator or
    controller change that moves it fails here until the card is rescored."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    try:
        from ship_model import score
    finally:
        sys.path.pop(0)
    for name, m in shipped_models().items():
        s = m.card["scores"]
        prefs = list(dict.fromkeys(tuple(r["preference"]) for r in s["rows"]))
        classic = tuple(dict.fromkeys(r["method"] for r in s["rows"] if r["method"] != name))
        got = score(name, preferences=prefs, classic=classic, scenario=s["scenario"],
                    links=s["links"], seed=s["seed"])
        key = lambda r: (tuple(r["preference"]), r["method"])  # noqa: E731
        want = {key(r): r for r in s["rows"]}
        have = {key(r): r for r in got["rows"]}
        assert set(want) == set(have)
        for k, r in want.items():
            for col in ("utilization", "latency_ratio", "p95_delay_ms", "loss_rate", "reward"):
                assert math.isclose(have[k][col], r[col], rel_tol=1e-4, abs_tol=1e-6), (k, col)
        if m.card["algo"] != "ppo-mocc":
            continue
        # what the card claims for MOCC: it beats both classic controllers' reward at each w
        for w in prefs:
            mine = want[(w, name)]["reward"]
            assert all(mine > want[(w, c)]["reward"] for c in classic), w
