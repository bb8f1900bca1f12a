"""ALFWorld-style household tasks: generated rooms, ALFWorld's grammar and texts, an expert."""

from envs.household.env import Household, State
from envs.household.pivot import HouseholdPivot
from envs.household.world import TASK_TYPES, World

__all__ = ["TASK_TYPES", "Household", "HouseholdPivot", "State", "World"]
