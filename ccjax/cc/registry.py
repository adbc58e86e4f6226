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

#: The window senders: the controllers whose ``Decision.rate`` is 0 (pace at cwnd/srtt), which
#: the simulator (``sim.core``) sends as ``SimConfig.window_sender`` says and recovers as
#: ``SimConfig.recovery`` says; the others decide a rate > 0 and neither setting reaches their
#: sending (``tests/test_cli.py`` holds each controller's first decision to this set).
WINDOW_CONTROLLERS = frozenset({"newreno", "cubic", "vegas"})
#: The controllers that track loss episodes (``newreno.track_episodes``, their state's ``ep``):
#: the only readers of ``MIStats.retx_lost_bytes``, so the only ones a lost retransmission
#: (``SimConfig.retx_loss``) changes anything for.
EPISODE_CONTROLLERS = frozenset({"newreno", "cubic", "vegas", "copa"})


def get_controller(name: str) -> Controller:
    try:
        return CONTROLLERS[name]
    except KeyError:
        raise ConfigError(
            f"cc={name!r} is invalid: known controllers are {', '.join(sorted(CONTROLLERS))}"
        ) from None
