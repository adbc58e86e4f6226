"""The README and the guide cannot go stale: the README's tour runs as written (with short
durations), and every `ccjax` command in the README and in docs/guide/ parses."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ccjax.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDE = sorted((ROOT / "docs" / "guide").glob("*.md"))

#: per subcommand, what the tour's run changes to be short: a flag's value replaced where the
#: command gives it, appended where it does not; ``--set`` items appended
SHORT: dict[str, list[tuple[str, str | None]]] = {
    "simulate": [("--duration-s", "2")],
    "eval": [("--links", "1"), ("--duration-s", "2")],
    "train": [("--n-envs", "36"), ("--set", "train.bootstrap_iters=0"),
              ("--set", "train.visit_iters=1"), ("--set", "train.max_cycles=1"),
              ("--set", "train.min_cycles=1"), ("--set", "train.eval_links=1"),
              ("--set", "train.eval_steps=10"), ("--set", "train.chunk=6")],
    "adapt": [("--iters", "2")],
    "sweep": [("--set", "train.iters=20"), ("--set", "train.n_envs=12"),
              ("--set", "train.eval_links=1"), ("--set", "train.eval_steps=10")],
    "bench": [("--duration-s", "0.2")],
}
#: tour commands that are only parsed: a Ray cluster (tests/test_sweep_ray.py runs the backend)
PARSE_ONLY = ("--backend ray",)


def _fenced(text: str) -> list[str]:
    """The lines of the ``` blocks of a Markdown text, continuation lines joined."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        if inside:
            if out and out[-1].endswith("\\"):
                out[-1] = out[-1][:-1] + " " + line.strip()
            else:
                out.append(line.strip())
    return out


def _commands(text: str) -> list[list[str]]:
    """The ``ccjax ...`` command lines of a text's code blocks, split as a shell would (comments
    dropped); ``.venv/bin/ccjax`` counts too, and a line of ``&&``-joined commands gives each."""
    cmds = []
    for line in _fenced(text):
        for part in line.split("&&"):
            part = part.strip()
            if part.startswith(".venv/bin/ccjax "):
                part = part[len(".venv/bin/"):]
            if part.startswith("ccjax "):
                cmds.append(shlex.split(part, comments=True))
    return cmds


def _shorten(argv: list[str]) -> list[str]:
    argv = list(argv)
    for flag, value in SHORT.get(argv[1], []):
        if flag != "--set" and flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    return argv


def _tour() -> str:
    text = README.read_text(encoding="utf-8")
    m = re.search(r"^## A short tour\n(.*?)^## ", text, re.S | re.M)
    assert m, "README.md has no '## A short tour' section"
    return m.group(1)


def test_readme_is_a_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, len(lines)
    text = "\n".join(lines)
    for page in ("simulating", "controllers", "validation", "training", "sweeps", "speed",
                 "models", "notebooks"):
        assert f"docs/guide/{page}.md" in text, page
    # no change history on the front page: no commit hashes in prose
    assert not re.search(r"\bcommit [0-9a-f]{7}\b", text)


@pytest.mark.parametrize("page", [README, *GUIDE], ids=lambda p: p.name)
def test_every_command_of_the_readme_and_the_guide_parses(page):
    cmds = _commands(page.read_text(encoding="utf-8"))
    if page == README:
        assert len(cmds) >= 10
    parser = build_parser()
    for argv in cmds:
        try:
            parser.parse_args(argv[1:])
        except SystemExit as e:
            raise AssertionError(f"{page.name}: {shlex.join(argv)} does not parse") from e


def test_the_guides_links_lead_to_files():
    for page in [README, *GUIDE]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text("utf-8")):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name}: {target}"


@pytest.mark.slow
def test_the_readme_tour_runs_as_written(tmp_path, monkeypatch, capsys):
    """Each command of the tour, in order, in a fresh folder (later commands read what earlier
    ones wrote), shortened by ``SHORT``; a shell line that is not ccjax (the trace's writer)
    runs as it is. The ccjax commands run in this process (``ccjax.cli.main``, as the
    ``ccjax`` script calls it), so their compiled programs are shared."""
    monkeypatch.chdir(tmp_path)
    ran = 0
    for line in _fenced(_tour()):
        if not line or line.startswith(("┃", "│", "link:", "sweep ", "batch ", "prefeval ",
                                         "out/", "...", "900 ")):
            continue  # what a command printed
        if line.startswith("python3 "):
            r = subprocess.run(line.replace("python3", shlex.quote(sys.executable), 1),
                               shell=True, cwd=tmp_path, capture_output=True, text=True)
            assert r.returncode == 0, (line, r.stderr)
            continue
        assert line.startswith("ccjax "), f"the tour has a line that is neither: {line!r}"
        argv = shlex.split(line, comments=True)
        if any(p in line for p in PARSE_ONLY):
            build_parser().parse_args(argv[1:])
            continue
        argv = _shorten(argv)
        code = main(argv[1:])
        out, err = capsys.readouterr()
        assert code == 0, (shlex.join(argv), out[-2000:], err[-2000:])
        ran += 1
    assert ran >= 9
    assert (tmp_path / "out" / "pareto.png").is_file()
    assert (tmp_path / "runs" / "mocc" / "policy" / "policy.json").is_file()
