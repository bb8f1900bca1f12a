"""Every credit method on one synthetic rollout batch, side by side.

Three household-style tasks ("put a hot egg in the garbage can"), four rollouts each, packed
into a padded batch. A tiny world model stands in for the environment: its states are the
GiGPO anchors, its success probability p(state) stands in for the policy's Monte-Carlo values
(ProVer's boundary continuations and SPO-chain's internal values are K=8 binomial samples of it),
and its goal atoms held -> heated -> placed stand in for VICT's verifier trace. The host-side
parts (judge, critic, core search) are replaced by simple deterministic rules; the kernels are the
real ones, reached through the credit-method registry.

Run: python -m prover_jax.demo
"""

from __future__ import annotations

import dataclasses

import numpy as np

from prover_jax import credit
from prover_jax.batch import Batch, Message, Trajectory, pack

K = 8
OBJECTS = ("egg", "apple", "mug")
ATOMS = ("held", "heated", "placed")


@dataclasses.dataclass(frozen=True)
class State:
    where: str = "start"
    held: bool = False
    heated: bool = False
    placed: str = ""

    def describe(self) -> str:
        return f"at {self.where}; holding={self.held}; heated={self.heated}; placed={self.placed}"

    def success_probability(self) -> float:
        """Chance that a mediocre policy finishes the task from here."""
        if self.placed:
            return float(self.placed == "garbagecan" and self.heated)
        return 0.1 + 0.25 * self.held + 0.45 * self.heated


def step(state: State, action: str) -> State:
    verb, *rest = action.split()
    if verb == "go":
        return dataclasses.replace(state, where=rest[-1])
    if verb == "take" and state.where == "fridge":
        return dataclasses.replace(state, held=True)
    if verb == "heat" and state.held and state.where == "microwave":
        return dataclasses.replace(state, heated=True)
    if verb == "put" and state.held:
        return dataclasses.replace(state, held=False, placed=state.where)
    return state


def plans(obj: str) -> dict[str, list[str]]:
    take = ["go to fridge", f"take {obj} from fridge"]
    heat = ["go to microwave", f"heat {obj} with microwave"]
    return {
        "expert": take + heat + ["go to garbagecan", f"put {obj} in garbagecan"],
        "detour": ["look"] + take + ["inventory"] + heat + ["go to garbagecan",
                                                             f"put {obj} in garbagecan"],
        "no-heat": take + ["go to garbagecan", f"put {obj} in garbagecan"],
        "wrong-place": take + heat + ["go to countertop", f"put {obj} in countertop"],
        "wander": ["look", "go to countertop", "inventory", "look", "go to sinkbasin"],
    }


GROUPS = (("expert", "no-heat", "wrong-place", "wander"),
          ("detour", "no-heat", "wander", "wander"),
          ("expert", "detour", "wrong-place", "expert"))


@dataclasses.dataclass
class Rollout:
    actions: list[str]
    states: list[State]  # states[t] is the state before action t; states[-1] the final one

    @property
    def reward(self) -> float:
        return self.states[-1].success_probability() if self.states[-1].placed else 0.0


def rollout(actions: list[str]) -> Rollout:
    states = [State()]
    for action in actions:
        states.append(step(states[-1], action))
    return Rollout(actions, states)


def token_ids(text: str) -> list[int]:
    return [1 + (sum(map(ord, word)) % 997) for word in text.split()]


def to_trajectory(obj: str, r: Rollout) -> Trajectory:
    messages = [Message(token_ids(f"Your task is to: put a hot {obj} in garbagecan."), "system")]
    for t, action in enumerate(r.actions):
        messages.append(Message(token_ids(action), "assistant", t))
        messages.append(Message(token_ids(r.states[t + 1].describe()), "tool"))
    return Trajectory(messages, r.reward)


def mc_value(state: State, rng: np.random.Generator) -> float:
    return float(rng.binomial(K, state.success_probability()) / K)


def eligible_rows(batch: Batch) -> np.ndarray:
    """bool [B]: rows of groups with a success rate strictly between 0 and 0.5 (SPEC §2)."""
    eligible = np.zeros(batch.num_rows, bool)
    for g in set(batch.group_ids.tolist()) - {-1}:
        rows = batch.group_ids == g
        eligible |= rows & (0 < batch.rewards[rows].mean() < 0.5)
    return eligible


def prover_inputs(batch: Batch, rollouts, eligible, rng):
    """Contrastive proposal + simulated boundary continuations for each eligible group."""
    start, end = np.zeros(batch.num_rows, np.int32), np.zeros(batch.num_rows, np.int32)
    delta = np.zeros(batch.num_rows, np.float32)
    for g in set(batch.group_ids[eligible].tolist()):
        rows = np.flatnonzero(batch.group_ids == g)
        wins = [i for i in rows if rollouts[i].reward == 1]
        best = min(wins, key=lambda i: (len(rollouts[i].actions), i))
        failed = [a for i in rows if rollouts[i].reward < 1 for a in rollouts[i].actions]
        turn = min(range(len(rollouts[best].actions) - 1),
                   key=lambda t: (failed.count(rollouts[best].actions[t]), t))
        start[best] = end[best] = turn
        states = rollouts[best].states
        delta[best] = mc_value(states[turn + 1], rng) - mc_value(states[turn], rng)
    return {"seg_start": start, "seg_end": end, "delta": delta}


def anchor_inputs(batch: Batch, rollouts):
    observations = [[s.describe() for s in r.states[:-1]] for r in rollouts]
    ids = credit.anchor_ids_from_observations(observations, batch.group_ids.tolist(),
                                              batch.num_turns)
    return {"anchor_ids": ids}


def spo_chain_inputs(batch: Batch, rollouts, eligible, rng):
    applies = eligible & (batch.rewards == 1)
    _, boundaries = credit.spo_chain_segments(batch.turn_valid)
    values = np.zeros(boundaries.shape, np.float32)
    for b, r in enumerate(rollouts):
        for k, turn in enumerate(np.asarray(boundaries[b])):
            if applies[b] and turn >= 0:
                values[b, k] = mc_value(r.states[turn], rng)
    return {"boundary_values": values, "spo_applies": applies}


def spo_tree_inputs(batch: Batch, rollouts):
    """Group 2 as a 2-2 tree: rows 8, 9 share a prefix node 1; rows 10, 11 share node 2."""
    parents = np.array([[-1, 0, 0, 1, 1, 2, 2]], np.int32)
    leaves = np.zeros((1, 7), np.float32)
    leaves[0, 3:] = [rollouts[b].reward for b in (8, 9, 10, 11)]
    tree_ids = np.full(batch.num_rows, -1, np.int32)
    tree_ids[8:12] = 0
    turn_nodes = np.full(batch.turn_valid.shape, -1, np.int32)
    for leaf, b in enumerate((8, 9, 10, 11)):
        n = len(rollouts[b].actions)
        turn_nodes[b, 2:n] = 3 + leaf
        if leaf % 2 == 0:  # the shared first two turns are trained in one container only
            turn_nodes[b, :2] = 1 + leaf // 2
    return {"tree_parents": parents, "tree_leaf_rewards": leaves, "tree_ids": tree_ids,
            "turn_nodes": turn_nodes}


def critic_inputs(batch: Batch, rollouts, eligible_rows):
    labels = np.zeros(batch.turn_valid.shape, np.int32)
    for b, r in enumerate(rollouts):
        for t, action in enumerate(r.actions):
            if action in ("look", "inventory"):
                continue
            before, after = r.states[t].success_probability(), r.states[t + 1].success_probability()
            labels[b, t] = 1 if after > before else -1
    return {"critic_labels": labels, "critic_labelled": eligible_rows}


def vict_inputs(batch: Batch, rollouts, outcome):
    """Goal atoms held -> heated -> placed; write edges where an atom changed, commit at put."""
    b_rows, t_max = batch.turn_valid.shape
    marginals = np.zeros((b_rows, len(ATOMS)), np.float32)
    omega = np.zeros((b_rows, t_max, len(ATOMS)), np.float32)
    for b, r in enumerate(rollouts):
        q = np.sign(outcome[b])
        final = r.states[-1]
        reached = [final.held or bool(final.placed), final.heated, final.placed == "garbagecan"]
        for t, (s0, s1) in enumerate(zip(r.states, r.states[1:])):
            omega[b, t, 0] += s1.held != s0.held and s1.held
            omega[b, t, 1] += s1.heated != s0.heated
            omega[b, t, 2] += bool(s1.placed) and not s0.placed
        if q > 0:
            marginals[b] = [1 / 3 if ok else 0.0 for ok in reached]
        elif q < 0 and final.placed:  # supporting prerequisites positive, wrong commit negative
            marginals[b] = [1 / 3 if reached[0] else 0, 1 / 3 if reached[1] else -1 / 3, -1 / 3]
    return {"marginals": marginals, "eligible": np.ones(marginals.shape, bool), "omega": omega}


METHODS = ("grpo", "rloo", "prover", "gigpo", "spo-chain", "spo-tree", "criticsearch", "vict",
           "prover+vict")


def build(seed: int = 0):
    """The synthetic batch, its rollouts and every method's inputs."""
    rng = np.random.default_rng(seed)
    rollouts, groups = [], []
    for obj, kinds in zip(OBJECTS, GROUPS):
        group = [rollout(plans(obj)[kind]) for kind in kinds]
        rollouts += group
        groups.append([to_trajectory(obj, r) for r in group])
    batch = pack(groups, row_multiple=8)
    outcome = np.asarray(credit.grpo(batch.rewards, batch.group_ids))
    eligible = eligible_rows(batch)
    padded = rollouts + [Rollout([], [State()])] * (batch.num_rows - len(rollouts))
    inputs = {
        "prover": prover_inputs(batch, padded, eligible, rng),
        "gigpo": anchor_inputs(batch, padded),
        "spo-chain": spo_chain_inputs(batch, padded, eligible, rng),
        "spo-tree": spo_tree_inputs(batch, padded),
        "criticsearch": critic_inputs(batch, padded, eligible),
        "vict": vict_inputs(batch, padded, outcome),
    }
    inputs["prover+vict"] = {**inputs["prover"], **inputs["vict"]}
    return batch, rollouts, inputs


def render(batch: Batch, rollouts, advantages: dict[str, np.ndarray]) -> str:
    width, cell = 26, max(len(m) for m in advantages) + 1
    header = f"{'turn':>4}  {'action':<{width}}" + "".join(f"{m:>{cell}}" for m in advantages)
    lines = [(f"batch: B={batch.num_rows} rows ({len(rollouts)} rollouts + padding), "
              f"T={batch.num_turns} turns, L={batch.seq_len} tokens"),
             "columns: per-turn advantage of each credit method (registry name)", ""]
    for b, r in enumerate(rollouts):
        lines.append(f"group {batch.group_ids[b]}  row {b}  R={batch.rewards[b]:.0f}  "
                     f"({len(r.actions)} turns)")
        lines.append(header)
        for t, action in enumerate(r.actions):
            cells = "".join(f"{advantages[m][b, t]:>+{cell}.3f}" for m in advantages)
            lines.append(f"{t:>4}  {action[:width]:<{width}}{cells}")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    batch, rollouts, inputs = build()
    advantages = {m: np.asarray(credit.compute(m, batch, inputs.get(m, {})).per_turn)
                  for m in METHODS}
    print(render(batch, rollouts, advantages))


if __name__ == "__main__":
    main()
