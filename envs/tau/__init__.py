"""tau-bench retail and airline: tool-calling customer-service environments with exact rewards.

``envs.make("tau-retail")`` / ``envs.make("tau-airline")`` build the environments (registered on
import); ``user=LLMUser(base_url=..., model=...)`` swaps the offline scripted user for a chat
model; ``tool_call(name, arguments)`` writes a tool-call action. The benchmark's data ship in
``envs/tau/data`` (MIT licence, see its README).
"""

from envs.tau.actions import tool_call
from envs.tau.env import Airline, Retail, TauEnv
from envs.tau.episode import State, Turn
from envs.tau.users import STOP, LLMUser, ScriptedUser, User, UserError
from envs.tau.verifier import TauVerifier

__all__ = [
    "STOP", "Airline", "LLMUser", "Retail", "ScriptedUser", "State", "TauEnv", "TauVerifier",
    "Turn", "User", "UserError", "tool_call",
]
