"""Reinforcement-learning environments over the simulator (DESIGN, "Controllers, environments").

``SingleFlowEnv`` is MOCC's and Aurora's environment: one rate-based agent flow per link,
optional classic cross traffic, an observation of the preference and a history of per-MI
features, a vector reward and its scalarisation. ``MultiFlowEnv`` is Astraea's: every active
flow of a link is an agent on its own clock, beside optional classic flows.
"""

from ccjax.envs.multi_flow import MultiFlowEnv, MultiFlowParams, MultiFlowState, MultiStepInfo
from ccjax.envs.single_flow import EnvParams, EnvState, SingleFlowEnv, StepInfo

__all__ = ["EnvParams", "EnvState", "MultiFlowEnv", "MultiFlowParams", "MultiFlowState",
           "MultiStepInfo", "SingleFlowEnv", "StepInfo"]
