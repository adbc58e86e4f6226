"""Controllers by CLI name."""

from __future__ import annotations

from ccjax.cc.base import Controller
from ccjax.cc.bbr import BBR
from ccjax.cc.const import Const
from ccjax.cc.copa import Copa
from ccjax.cc.cubic import Cubic
from ccjax.cc.newreno import NewReno
from ccjax.cc.vegas import Vegas
from ccjax.cc.vivace import Vivace
from ccjax.errors import ConfigError

CONTROLLERS: dict[str, Controller] = {
    c.name: c for c in (Const(), NewReno(), Cubic(), Vegas(), BBR(), Copa(), Vivace())
}


def get_controller(name: str) -> Controller:
    try:
        return CONTROLLERS[name]
    except KeyError:
        raise ConfigError(
            f"cc={name!r} is invalid: known controllers are {', '.join(sorted(CONTROLLERS))}"
        ) from None
