"""A household whose actions can be made slow, to kill or time out a worker mid-step."""

from __future__ import annotations

import time

from envs.household import Household


class SlowHousehold(Household):
    """``slow <action>`` sleeps one second before doing ``<action>``."""

    def step(self, action: str):
        if action.startswith("slow "):
            time.sleep(1.0)
            action = action.removeprefix("slow ")
        return super().step(action)
