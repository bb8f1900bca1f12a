"""ALFWorld's engine as its own package plays it, with nothing of this project loaded: the
oracle for `envs.alfworld`'s faster engine (tests/envs/test_alfworld.py).

Reads JSON ``[{"game": GAME_JSON, "commands": [...]}, ...]`` on stdin; writes, per game, the
intro and then per command its feedback, admissible commands and whether the game is won.

Usage: python -m tests.envs.alfworld_stock < games.json
"""

from __future__ import annotations

import json
import os
import sys
import tempfile


def main() -> None:
    os.environ.setdefault("ALFWORLD_DATA", tempfile.mkdtemp())
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs import PddlEnv

    transcripts = []
    for item in json.load(sys.stdin):
        env = AlfredDemangler(PddlEnv(textworld.EnvInfos(won=True, admissible_commands=True)))
        env.load(item["game"])
        state = env.reset()
        lines = [[state.feedback, state["admissible_commands"], False]]
        for command in item["commands"]:
            state, _, _ = env.step(command)
            lines.append([state.feedback, state["admissible_commands"], bool(state["won"])])
        transcripts.append(lines)
    sys.stdout.write(json.dumps(transcripts))


if __name__ == "__main__":
    main()
