"""Clients for AgentGym's environment servers (ALFWorld, WebShop, SearchQA)."""

from envs.agentgym.env import AgentGym, AgentGymAlfworld, AgentGymSearchqa, AgentGymWebshop
from envs.agentgym.transport import ServerError

__all__ = ["AgentGym", "AgentGymAlfworld", "AgentGymSearchqa", "AgentGymWebshop",
           "ServerError"]
