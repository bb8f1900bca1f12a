"""ALFWorld's own TextWorld/PDDL engine as an environment (the ``alfworld`` extra)."""

from envs.alfworld.env import Alfworld, AlfworldSmall, Replay

__all__ = ["Alfworld", "AlfworldSmall", "Replay"]
