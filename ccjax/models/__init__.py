"""Trained models that ship inside the package, so a controller can be evaluated before anything
is trained.

A shipped model is a folder ``ccjax/models/<name>/`` holding a policy directory's two files
(``policy.json`` and ``policy.npz``, format ``ccjax-policy/1``: ``ccjax.agents.export``) and a
``model.json`` card: how it was trained (the commands), on what machine and how long, the
preference it runs at unless told otherwise, and what it scores beside classic controllers on
held-out links (``scripts/ship_model.py`` writes it from a training run). Adding a model is
adding such a folder: the name then works wherever a controller's name or a policy directory
does (``ccjax eval --model NAME``, ``ccjax simulate --cc NAME,cubic``,
``ccjax.evaluate.resolve_method``, ``ccjax.deploy.load``), and ``ccjax models`` lists it.

Controller names win over model names (a model may not be called ``cubic``), and model names win
over directories of the same name in the working directory (give ``./mocc`` for such a folder).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccjax.errors import ConfigError

#: where the shipped models live (inside the installed package)
MODELS_DIR = Path(__file__).resolve().parent
#: the card's name inside a model's folder
CARD_FILE = "model.json"
#: the card's fields and their types: what ``ccjax models`` shows and the tests hold each card to
CARD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "name": str, "algo": str, "summary": str, "commands": list, "trained": dict,
    "preference": list, "scores": dict,
}
_NAME = re.compile(r"^[a-z][a-z0-9-]*$")


@dataclass(frozen=True)
class ShippedModel:
    """One shipped model: its name, its policy directory and its card."""

    name: str
    path: Path
    card: dict[str, Any]


def _read_card(folder: Path) -> dict[str, Any]:
    where = folder / CARD_FILE
    try:
        card = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"model card {where} is unreadable: {e}") from None
    for key, typ in CARD_FIELDS.items():
        if not isinstance(card.get(key), typ):
            raise ConfigError(f"model card {where} is invalid: field {key!r} must be a "
                              f"{typ.__name__ if isinstance(typ, type) else typ}")
    if card["name"] != folder.name:
        raise ConfigError(f"model card {where} is invalid: its name {card['name']!r} is not "
                          f"its folder's ({folder.name!r})")
    return card


def _folders() -> list[Path]:
    """The folders of ``MODELS_DIR`` that are shipped models, in name order."""
    return sorted(p for p in MODELS_DIR.iterdir()
                  if p.is_dir() and _NAME.match(p.name) and (p / CARD_FILE).is_file())


def shipped_models() -> dict[str, ShippedModel]:
    """Every shipped model by name, in name order: each folder of ``MODELS_DIR`` that holds a
    policy and a card."""
    return {f.name: ShippedModel(f.name, f, _read_card(f)) for f in _folders()}


def model_names() -> list[str]:
    return [f.name for f in _folders()]


def shipped_model(name: str) -> ShippedModel | None:
    """The shipped model called ``name``, or None where there is none (a path, a controller's
    name, a typo)."""
    if not isinstance(name, str) or not _NAME.match(name):
        return None
    folder = MODELS_DIR / name
    if not (folder.is_dir() and (folder / CARD_FILE).is_file()):
        return None
    return ShippedModel(name, folder, _read_card(folder))
