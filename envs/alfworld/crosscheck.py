"""Household against ALFWorld's engine on the same layouts: ``python -m envs.alfworld.crosscheck``.

For generated layouts (`envs.alfworld.games`), both games are played side by side with the same
commands (the planner's next command, or with probability ``wander`` a random admissible one;
ALFWorld's ``move O to R`` is household's ``put O in/on R``). Before every command the
admissible sets are compared, after it the feedback, whether the command was accepted and the
goal check. Prints a markdown table of the differences by kind, with a count and a first
example each.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter

from envs.alfworld import games
from envs.alfworld.engine import MOVE, Engine
from envs.base import Task
from envs.household import env as household


def as_household(command: str) -> str:
    """ALFWorld's command in household's grammar (``move O to R`` -> ``put O in/on R``)."""
    move = MOVE.fullmatch(command)
    return f"put {move.group(1)} in/on {move.group(2)}" if move else command


def compare(seeds: range, small: bool = True, wander: float = 0.4, max_steps: int = 20
            ) -> tuple[Counter, dict[str, str], int]:
    """(differences by kind, a first example of each, commands played)."""
    rng, engine = random.Random(0), Engine()
    differences: Counter = Counter()
    examples: dict[str, str] = {}
    played = 0

    def note(kind: str, example: str) -> None:
        differences[kind] += 1
        examples.setdefault(kind, example)

    for seed in seeds:
        world, game = games.generated_game(seed, small)
        engine.load(game)
        engine.reset()
        state = household.initial_state(Task("household", "train", 0), world)
        for _ in range(max_steps):
            theirs = {as_household(c) for c in engine.admissible()}
            ours = set(household.admissible(world, state))
            for command in sorted(theirs - ours):
                note(f"admissible in ALFWorld only: `{command.split()[0]}`", command)
            for command in sorted(ours - theirs):
                note(f"admissible in household only: `{command.split()[0]}`", command)
            plan = engine.plan()
            command = (rng.choice(engine.admissible()) if rng.random() < wander or not plan
                       else plan[0])
            feedback, accepted, won = engine.step(command)
            state, text, valid = household.transition(world, state, as_household(command))
            state = state._replace(turn=state.turn + 1)
            played += 1
            verb = command.split()[0]
            if feedback != text:
                note(f"feedback differs: `{verb}`", f"{command}: {feedback!r} / {text!r}")
            if accepted != valid:
                note(f"accepted differs: `{verb}`", f"{command}: {accepted} / {valid}")
            if won != household.goal_reached(world, state):
                note(f"goal check differs: `{verb}`", f"{command}: ALFWorld {won}")
            if won:
                break
    return differences, examples, played


def table(differences: Counter, examples: dict[str, str]) -> str:
    """The differences as a markdown table, most frequent first."""
    lines = ["| difference | count | first example (ALFWorld / household) |", "|---|---:|---|"]
    for kind, count in differences.most_common():
        example = examples[kind].replace("\n", " ").replace("|", "\\|")
        lines.append(f"| {kind} | {count} | {example[:160]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", type=int, default=30)
    parser.add_argument("--full", action="store_true", help="household's rooms, not the small")
    args = parser.parse_args(argv)
    differences, examples, played = compare(range(args.layouts), small=not args.full)
    print(f"{args.layouts} layouts, {played} commands\n")
    print(table(differences, examples))


if __name__ == "__main__":
    main()
