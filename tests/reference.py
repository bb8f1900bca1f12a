"""Straightforward per-row numpy/Python implementations of every credit kernel.

They are the test oracles (float64, loops over rows, groups and turns, written from SPEC.md and
the papers rather than from the kernels) and the baseline of `bench/credit_kernels.py`, which
loops over rows the way the public reference implementations do.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np


def _groups(group_ids):
    members = defaultdict(list)
    for row, g in enumerate(group_ids):
        if g >= 0:
            members[int(g)].append(row)
    return members


def n_turns(turn_valid):
    return [int(np.sum(v)) for v in turn_valid]


def grpo(rewards, group_ids, scale="none", eps=1e-6):
    out = np.zeros(len(rewards))
    for rows in _groups(group_ids).values():
        r = np.asarray([rewards[i] for i in rows], np.float64)
        if np.all(r == r[0]):
            continue
        std = np.std(r, ddof=1) if len(r) > 1 else 0.0
        for i in rows:
            adv = rewards[i] - r.mean()
            out[i] = adv / (std + eps) if scale == "std" else adv
    return out


def rloo(rewards, group_ids):
    out = np.zeros(len(rewards))
    for rows in _groups(group_ids).values():
        r = np.asarray([rewards[i] for i in rows], np.float64)
        if len(rows) < 2 or np.all(r == r[0]):
            continue
        for k, i in enumerate(rows):
            out[i] = r[k] - (r.sum() - r[k]) / (len(rows) - 1)
    return out


def per_turn(values, turn_valid):
    values = np.asarray(values, np.float64)
    out = np.zeros(np.shape(turn_valid))
    for b in range(out.shape[0]):
        for t in range(out.shape[1]):
            if turn_valid[b][t]:
                out[b, t] = values[b] if values.ndim == 1 else values[b, t]
    return out


def to_tokens(values, turn_ids, loss_mask):
    """Per row, vectorised within the row (as verl broadcasts `score * response_mask`)."""
    values = np.asarray(values)
    out = np.zeros(np.shape(turn_ids), np.float32)
    for b in range(out.shape[0]):
        mask = np.asarray(loss_mask[b])
        if values.ndim == 1:
            out[b] = values[b] * mask
        else:
            out[b, mask] = values[b][np.asarray(turn_ids[b])[mask]]
    return out


def high_prob_mask(logprobs, loss_mask, threshold=0.9):
    return np.stack([np.asarray(mask) & (np.asarray(lp) >= np.log(threshold))
                     for lp, mask in zip(logprobs, loss_mask)])


def prover(base, turn_valid, seg_start, seg_end, delta, lam=1.0):
    out = per_turn(base, turn_valid)
    for b in range(out.shape[0]):
        if delta[b] > 0:
            for t in range(seg_start[b], seg_end[b] + 1):
                if turn_valid[b][t]:
                    out[b, t] += lam * delta[b]
    return out


def progress_credit(base, turn_valid, progress_gain, weight=1.0):
    out = per_turn(base, turn_valid)
    for b in range(out.shape[0]):
        for t in range(out.shape[1]):
            if turn_valid[b][t]:
                out[b, t] += weight * progress_gain[b][t]
    return out


def gigpo(rewards, group_ids, anchor_ids, turn_valid, step_rewards=None, gamma=0.95, omega=1.0,
          mode="mean_norm", episode_stats="per_trajectory", eps=1e-6):
    """GiGPO as verl-agent computes it, over one record per (trajectory, turn)."""
    records = []  # (row, turn, group, anchor, episode score, step return)
    for b, g in enumerate(group_ids):
        if g < 0:
            continue
        t_b = int(np.sum(turn_valid[b]))
        r = (np.asarray(step_rewards[b][:t_b], np.float64) if step_rewards is not None
             else np.eye(t_b)[t_b - 1] * rewards[b])
        ret, running = np.zeros(t_b), 0.0
        for t in reversed(range(t_b)):
            running = r[t] + gamma * running
            ret[t] = running
        for t in range(t_b):
            records.append((b, t, int(g), int(anchor_ids[b][t]), float(rewards[b]), ret[t]))

    def normalise(scores, singleton_mean_zero):
        if len(scores) == 1:
            mean, std = (0.0 if singleton_mean_zero else scores[0]), 1.0
        else:
            mean, std = np.mean(scores), np.std(scores, ddof=1)
        if np.all(np.asarray(scores) == scores[0]) and len(scores) > 1:
            return lambda x: 0.0
        if mode == "mean_norm":
            return lambda x: x - mean
        return lambda x: (x - mean) / (std + eps)

    episode_scores, seen = defaultdict(list), set()
    for b, _, g, _, score, _ in records:
        if episode_stats == "per_trajectory" and b in seen:
            continue
        seen.add(b)
        episode_scores[g].append(score)
    episode_fn = {g: normalise(s, True) for g, s in episode_scores.items()}
    step_scores = defaultdict(list)
    for _, _, g, a, _, ret in records:
        step_scores[(g, a)].append(ret)
    step_fn = {k: normalise(s, False) for k, s in step_scores.items()}
    out = np.zeros(np.shape(turn_valid))
    for b, t, g, a, score, ret in records:
        out[b, t] = episode_fn[g](score) + omega * step_fn[(g, a)](ret)
    return out


def spo_chain_segments(t_b, num_segments):
    """Turn lists of the near-equal segments of a row with t_b turns."""
    return np.array_split(np.arange(t_b), min(num_segments, t_b))


def spo_chain(base, rewards, group_ids, turn_valid, boundary_values, applies, gamma=1.0,
              num_segments=3):
    out = per_turn(base, turn_valid)
    means = {g: np.mean([rewards[i] for i in rows]) for g, rows in _groups(group_ids).items()}
    for b in range(out.shape[0]):
        if not applies[b] or group_ids[b] < 0:
            continue
        segments = spo_chain_segments(n_turns(turn_valid)[b], num_segments)
        values = [means[int(group_ids[b])], *boundary_values[b][:len(segments) - 1], rewards[b]]
        for k, turns in enumerate(segments):
            out[b, turns] = gamma * values[k + 1] - values[k]
    return out


def spo_tree_values(parents, leaf_rewards):
    values, branch = np.zeros(np.shape(parents)), np.zeros(np.shape(parents))
    for g, par in enumerate(parents):
        children = defaultdict(list)
        for node, p in enumerate(par):
            if p >= 0:
                children[int(p)].append(node)

        def leaves(node, children=children, rewards=leaf_rewards[g]):
            if not children[node]:
                return [rewards[node]]
            return [r for c in children[node] for r in leaves(c)]

        for node in range(len(par)):
            values[g, node] = np.mean(leaves(node))
        for node, p in enumerate(par):
            if p >= 0:
                branch[g, node] = values[g, node] - values[g, p]
    return values, branch


def spo_tree(base, turn_valid, tree_ids, turn_nodes, parents, leaf_rewards):
    out = per_turn(base, turn_valid)
    _, branch = spo_tree_values(parents, leaf_rewards)
    for b in range(out.shape[0]):
        if tree_ids[b] < 0:
            continue
        for t in range(out.shape[1]):
            node = turn_nodes[b][t]
            out[b, t] = branch[tree_ids[b], node] if turn_valid[b][t] and node >= 0 else 0.0
    return out


def criticsearch(base, group_ids, turn_valid, labels, labelled, outcome_weight=0.75,
                 critic_weight=0.25):
    out = per_turn(base, turn_valid)
    for rows in _groups(group_ids).values():
        if not all(labelled[i] for i in rows):
            continue
        for b in rows:
            for t in range(out.shape[1]):
                if turn_valid[b][t] and labels[b][t] != 0:
                    out[b, t] = outcome_weight * base[b] + critic_weight * labels[b][t]
    return out


def vict_normalise(marginals, eligible, omega, group_ids, center=False, eps=1e-8,
                   min_supported=2):
    marginals = np.asarray(marginals, np.float64)
    out = np.zeros(marginals.shape)
    has_edge = (np.asarray(omega) > 0).any(axis=1)
    for rows in _groups(group_ids).values():
        for j in range(marginals.shape[1]):
            sup = [i for i in rows if marginals[i, j] != 0 and eligible[i][j] and has_edge[i, j]]
            if len(sup) < min_supported:
                continue
            d = marginals[sup, j]
            if center:
                med = np.median(d)
                scale = 1.4826 * np.median(np.abs(d - med))
            else:
                med, scale = 0.0, np.median(np.abs(d))
            if scale <= 0:
                continue
            for i in sup:
                out[i, j] = (marginals[i, j] - med) / (scale + eps)
    return out


def vict_corrections(normalised, omega, z_eps=1e-8):
    omega = np.asarray(omega, np.float64)
    b, t, m = omega.shape
    out = np.zeros((b, t))
    for i in range(b):
        for j in range(m):
            z = omega[i, :, j].sum() + z_eps
            for s in range(t):
                out[i, s] += normalised[i][j] * omega[i, s, j] / z
    return out


def vict_redistribute(base, marginals, eligible, omega, turn_valid, group_ids, center=False,
                      gamma_lambda=1.0, calibration="nonzero", clip_quantile=0.95, eps=1e-8):
    base_bt = per_turn(base, turn_valid)
    valid = np.asarray(turn_valid, bool)
    norm = vict_normalise(marginals, eligible, omega, group_ids, center, eps)
    vict = vict_corrections(norm, omega, eps) * valid
    # Corrections that cancel exactly in float32 leave ~1e-8 residues in float64; they are zero.
    vict[np.abs(vict) < 1e-6] = 0.0
    mags = np.abs(base_bt[valid])
    if calibration == "nonzero":
        mags = mags[mags > 0]
    nonzero = np.abs(vict[valid & (vict != 0)])
    if mags.size == 0 or nonzero.size == 0:
        return base_bt, vict
    lam = gamma_lambda * np.median(mags) / (np.median(nonzero) + eps)
    c = np.quantile(mags, clip_quantile)
    return np.where(valid, base_bt + lam * np.clip(vict, -c, c), 0.0), vict
