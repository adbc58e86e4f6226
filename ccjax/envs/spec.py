"""What an environment offers an agent: the sizes and kinds ``Agent.init`` builds its networks
from (DESIGN, "Agents"), so an agent never reads them off one environment class.

``EnvSpec`` is static (shapes), hashable and JSON-friendly; every environment has a ``spec``
property, and the trainer, sweeps and export pass it along instead of ``obs_dim, action_dim``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: the action kinds an environment can declare
ACTION_KINDS = ("box", "discrete")


@dataclass(frozen=True)
class ActionSpace:
    """``box``: ``n`` real values (PPO-MOCC's rate change a in Eq. 1); ``discrete``: one of ``n``
    choices (AUTO's seven rate multipliers, Eq. 7)."""

    kind: str
    n: int

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ValueError(f"action kind {self.kind!r} is invalid: one of "
                             f"{', '.join(ACTION_KINDS)}")
        if self.n < 1:
            raise ValueError(f"action n={self.n} is invalid: >= 1")


@dataclass(frozen=True)
class EnvSpec:
    """Sizes an agent needs.

    * ``obs_dim``: the actor's observation, the preference first (``pref_dim`` values, 0 when the
      agent sees none) and then the feature history;
    * ``critic_dim``: the critic-only input beside it (``Trajectory.critic``; 0 for none);
    * ``action``: its ``ActionSpace``;
    * ``n_objectives``: length of the vector reward (``Trajectory.objectives``); a preference has
      this many weights;
    * ``objective_names``: short names of the objectives, for logs (``w_<name>`` columns);
    * ``agents_per_link``: agents sharing one bottleneck (1 for the single-flow environment).
    """

    obs_dim: int
    critic_dim: int
    action: ActionSpace
    n_objectives: int
    pref_dim: int
    objective_names: tuple[str, ...]
    agents_per_link: int = 1

    def __post_init__(self) -> None:
        if len(self.objective_names) != self.n_objectives:
            raise ValueError(f"objective_names {self.objective_names} must name "
                             f"{self.n_objectives} objectives")
        if self.pref_dim not in (0, self.n_objectives):
            raise ValueError(f"pref_dim={self.pref_dim} is invalid: 0 or n_objectives="
                             f"{self.n_objectives}")

    def to_dict(self) -> dict:
        return asdict(self)
