"""Reinforcement-learning environments over the simulator (DESIGN, "Controllers, environments").

``SingleFlowEnv`` is MOCC's and Aurora's environment: one rate-based agent flow per link,
optional classic cross traffic, an observation of the preference and a history of per-MI
features, a vector reward and its scalarisation.
"""

from ccjax.envs.single_flow import EnvParams, EnvState, SingleFlowEnv, StepInfo

__all__ = ["EnvParams", "EnvState", "SingleFlowEnv", "StepInfo"]
