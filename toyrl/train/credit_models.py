"""The learned models and measurements credit methods are built on, fitted each step by the Trainer.

Dimension legend: B rollouts, T tokens, H turns, D hidden size, A env actions, N scored prefixes.

What a method needs is declared in its registry entry (``toyrl.credit.NEEDS``); the Trainer provides
each need from this module, with the policy's detached hidden states as features: ``state`` (B, H, D)
the hidden state just before the turn, ``action`` (B, H, D) the mean hidden state over the turn's
policy tokens (``credit.fit.turn_action_features``).

    models = CreditModels(lr=1e-2, gamma=1.0, env="mock_search", env_kwargs={}, seed=0)
    got = models.provide(ro, needs={"double_critic"}, mine=("double_critic",), policy=policy, codec=codec,
                         values=False, z=False)
    got["estimator"]   # {"q": (B, H, 2), "v": (B, H, 2)}: the estimator's keywords
    got["clip"]        # {"z": (B, H)} when a clip scheme reads the information gain (a2tgpo)
    got["logs"]        # run-log figures: each model's loss and error

One method per model (``values``: Turn-PPO / GAE critic; ``archer``: ArCHer, arXiv 2402.19446;
``sweet``: SWEET-RL, arXiv 2503.15478; ``progress``: SPA-RL, arXiv 2505.20732; ``info_gain``: IGPO /
A2TGPO, arXiv 2605.06200, measured with ``answer_probs``). Answers and reference solutions are read
from ``oracle(tasks)``, an env core apart from the training one (its random stream stays untouched).

Every model scores the batch before its update on it and logs its loss and an error:
``critic_loss`` / ``value_error`` (|V - R| on valid turns), ``archer_q_loss`` / ``archer_v_loss`` /
``archer_error`` (|min Q - R|), ``sweet_loss`` / ``sweet_pair_acc`` (the share of same-group pairs
the critic ranks as their outcomes do), ``progress_loss`` / ``progress_error`` (|sum_k c_k - R|),
``info_gain_abs`` / ``answer_prob`` (the answer's probability after the last turn).
"""
from __future__ import annotations

import copy
from typing import Sequence

import numpy as np
import torch

from ..credit.critics import DoubleCritic, TurnCritic
from ..credit.fit import (archer_fit, group_center, info_gain, pair_accuracy, progress_fit, reference_features,
                          sweet_fit, turn_action_features, value_fit)
from ..credit.info_gain import a2tgpo_z
from ..envs import make_core

__all__ = ["CreditModels", "policy_features", "prefix_ends", "answer_probs", "privileged_reference",
           "PROGRESS_LR_SCALE"]

PROGRESS_LR_SCALE = 0.1
"""the progress estimator steps at lr * 0.1: its target is a sum over up to max_turns outputs, so one
AdamW step moves it about H times more than a per-turn value. Measured on GridWorld 4x4 (seed 0,
20 steps, P=8 x G=8): at lr 1e-2 its loss went 1.7 -> 245 -> 15 -> 61 ... (mean of the last 5 steps
7.3), at 1e-3 1.7 -> 0.10 (last 5: 0.66)"""


def _masked_mean_abs(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float(x.detach().abs()[mask].mean()) if bool(mask.any()) else 0.0


def policy_features(policy, b) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Detached policy hidden states (B, T, D); per turn, the state the turn was taken in (the hidden
    state of the token just before the turn's first policy token) (B, H, D); and the turn's action
    (the mean hidden state over its policy tokens, ``credit.fit.turn_action_features``) (B, H, D)."""
    with torch.no_grad():
        hid = policy.hidden(b.tokens, b.turn_id >= 0)                                  # (B, T, D)
    pos = torch.arange(b.T, device=hid.device).expand(b.B, b.T).float()
    first = b.token_to_turn(pos, "min").long().clamp(min=1) - 1                        # (B, H)
    state = hid.gather(1, first[..., None].expand(-1, -1, hid.shape[-1]))              # (B, H, D)
    return hid, state, turn_action_features(hid, b.policy_mask, b.turn_id, b.H)


class CreditModels:
    """The models of one run, each built (and its AdamW made) on first use, sized to its features."""

    def __init__(self, lr: float = 1e-2, gamma: float = 1.0, env: str = "gridworld", env_kwargs=None, seed: int = 0):
        self.lr, self.gamma = lr, gamma                  # every model's learning rate; value / ArCHer discount
        self.env, self.env_kwargs, self.seed = env, dict(env_kwargs or {}), seed
        self.critic = self.double = self.target = self.sweet_critic = self.progress_critic = None
        self.opt: dict = {}
        self.oracles: dict = {}                          # n -> an env core of n copies apart from the training one

    def oracle(self, tasks: np.ndarray):
        """An env core apart from the training one, reset on ``tasks`` (answers, reference solutions)."""
        if len(tasks) not in self.oracles:
            self.oracles[len(tasks)] = make_core(self.env, len(tasks), seed=self.seed, **self.env_kwargs)
        self.oracles[len(tasks)].reset(tasks)
        return self.oracles[len(tasks)]

    def provide(self, ro, needs, mine, *, policy, codec, values: bool, z: bool) -> dict:
        """Fit or measure every need in ``needs`` (words of ``credit.NEEDS``) on the rollout ``ro`` ->
        {"estimator": keywords for the needs in ``mine`` (the estimator's), "clip": {"z"} if ``z``, "logs"}.
        ``values``: fit the value critic (TurnBatch.values; token_values if the estimator needs them).
        Batch fields (values, privileged, info_gain) are set on ``ro.batch``. greedy_baseline is the
        Trainer's (a greedy rollout); node and entropy every rollout records."""
        b, est, clip, logs = ro.batch, {}, {}, {}
        if values or set(needs) & {"double_critic", "privileged_critic", "progress"}:
            hid, state, action = policy_features(policy, b)
        if values:
            v, token_values, lg = self.values(b, hid, state)
            b = b.replace(values=v)
            est.update({"token_values": token_values} if "token_values" in mine else {})
            logs.update(lg)
        if "double_critic" in needs:
            q, v, lg = self.archer(b, state, action)
            est.update({"q": q, "v": v} if "double_critic" in mine else {})
            logs.update(lg)
        if "privileged_critic" in needs:
            info, ref = privileged_reference(self.oracle(ro.tasks), b.device)
            b = b.replace(privileged=info)
            adv, lg = self.sweet(b, state, action, ref)
            est.update({"critic_adv": adv} if "privileged_critic" in mine else {})
            logs.update(lg)
        if "progress" in needs:
            c, lg = self.progress(b, state, action)
            est.update({"progress": c} if "progress" in mine else {})
            logs.update(lg)
        if "info_gain" in needs:
            ig, lg = self.info_gain(ro, policy, codec)
            b = b.replace(info_gain=ig)
            logs.update(lg)
            if z:
                prompt = b.task if b.task is not None else b.group
                clip["z"] = a2tgpo_z(ig, b.turn_mask, prompt, outcome=b.outcome())   # (B, H)
        ro.batch = b
        return {"estimator": est, "clip": clip, "logs": logs}

    def info_gain(self, ro, policy, codec) -> tuple[torch.Tensor, dict]:
        """IG (B, H): the policy's probability of the ground-truth answer after each turn minus before it
        (``answer_probs`` at the rollout's temperature and grammar, no gradient), and logs."""
        b, core = ro.batch, self.oracle(ro.tasks)
        answers = [codec.action_ids(core, core.answer_action(i), i) for i in range(b.B)]
        p = answer_probs(policy, b.tokens, prefix_ends(ro.episodes, b.H), answers, temperature=ro.temperature,
                         grammar=ro.grammar)                                            # (B, H + 1)
        ig = info_gain(p, b.turn_mask)
        p_end = p.gather(1, b.turn_mask.sum(1, keepdim=True)).mean().item()
        return ig, {"info_gain_abs": _masked_mean_abs(ig, b.turn_mask), "answer_prob": p_end}

    def _opt(self, name: str, model: torch.nn.Module, scale: float = 1.0) -> torch.optim.Optimizer:
        if name not in self.opt:
            self.opt[name] = torch.optim.AdamW(model.parameters(), lr=self.lr * scale)
        return self.opt[name]

    def value_critic(self, d: int, device) -> TurnCritic:
        """The run's turn value critic on d features, built on first use (RL's first step, or a warm-up before it)."""
        if self.critic is None:
            self.critic = TurnCritic(d).to(device)
        return self.critic

    def values(self, b, hid: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """Turn values (B, H) before the step, the stepped critic at every token (B, T), and logs."""
        critic = self.value_critic(hid.shape[-1], hid.device)
        ret = b.returns(self.gamma)                                                    # (B, H)
        values, loss = value_fit(critic, self._opt("critic", critic), state, ret, b.turn_mask)
        with torch.no_grad():
            token_values = critic(hid)                                                 # (B, T)
        return values, token_values, {"critic_loss": loss, "value_error": _masked_mean_abs(values - ret, b.turn_mask)}

    def archer(self, b, state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """ArCHer's q, v (B, H, 2) before the TD step (a^pi: the batch's own action), and logs."""
        if self.double is None:
            self.double = DoubleCritic(state.shape[-1], action.shape[-1]).to(state.device)
            self.target = copy.deepcopy(self.double)
        q, v, q_loss, v_loss = archer_fit(self.double, self.target, self._opt("archer", self.double), state, action,
                                          b.turn_reward, b.turn_mask, gamma=self.gamma)
        err = _masked_mean_abs(q.amin(-1) - b.returns(self.gamma), b.turn_mask)
        return q, v, {"archer_q_loss": q_loss, "archer_v_loss": v_loss, "archer_error": err}

    def sweet(self, b, state: torch.Tensor, action: torch.Tensor, ref: torch.Tensor,
              beta: float = 0.1) -> tuple[torch.Tensor, dict]:
        """SWEET-RL's turn advantages (B, H) from a critic on (state, action, reference (B, A)), centered per
        group (``group_center``: its Bradley-Terry loss fixes scores only up to a shift per group), and logs."""
        x = torch.cat([state, action, ref[:, None, :].expand(-1, state.shape[1], -1)], -1)   # (B, H, 2D + A)
        if self.sweet_critic is None:
            self.sweet_critic = TurnCritic(x.shape[-1]).to(x.device)
        R = b.outcome()
        adv, loss = sweet_fit(self.sweet_critic, self._opt("sweet", self.sweet_critic), x, b.turn_mask, R, b.group,
                              beta=beta)
        return group_center(adv, b.turn_mask, b.group), {"sweet_loss": loss,
                                                         "sweet_pair_acc": pair_accuracy(adv.sum(1), R, b.group)}

    def progress(self, b, state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """SPA-RL's per-turn progress c (B, H) from a critic on (state, action), and logs."""
        x = torch.cat([state, action], -1)                                             # (B, H, 2D)
        if self.progress_critic is None:
            self.progress_critic = TurnCritic(x.shape[-1]).to(x.device)
        R = b.outcome()
        opt = self._opt("progress", self.progress_critic, PROGRESS_LR_SCALE)
        c, loss = progress_fit(self.progress_critic, opt, x, b.turn_mask, R)
        return c, {"progress_loss": loss, "progress_error": float((c.sum(1) - R).abs().mean())}


def prefix_ends(episodes: Sequence, H: int) -> np.ndarray:
    """(B, H + 1) long: where the flat sequence ends before the first turn (column 0) and after each
    turn's policy and observation tokens (column k + 1); -1 past a row's last turn (the layout of
    ``flatten.to_rollout``). Example: prompt 3 tokens, turns of 2 + 4 and 2 + 0 -> [[3, 9, 11]]."""
    out = np.full((len(episodes), H + 1), -1, np.int64)
    for i, ep in enumerate(episodes):
        s = len(ep.prompt)
        out[i, 0] = s
        for k, t in enumerate(ep.turns[:H]):
            s += len(t.gen) + len(t.obs)
            out[i, k + 1] = s
    return out


def _grammar_states(grammar, answers: torch.Tensor, amask: torch.Tensor) -> torch.Tensor:
    """(N, A) the grammar state each answer token would be sampled in, walking the turn automaton."""
    run = grammar.start(answers.shape[0])
    for j in range(answers.shape[1]):
        run.advance(answers[:, j], None, amask[:, j])
    return run.record(answers.shape[1])[0]


@torch.no_grad()
def answer_probs(policy, tokens: torch.Tensor, ends: np.ndarray, answers: Sequence[Sequence[int]], *,
                 temperature: float = 1.0, grammar=None, chunk: int = 64) -> torch.Tensor:
    """The policy's probability of each row's ground-truth answer after each prefix -> (B, H + 1), 0 where ends < 0.

        p_{i,k} = exp( mean_{j decided} log pi(y_j | x_{i, < end_{i,k}}, y_{<j}) )

    ``answers[i]`` are the token ids of row i's answer turn (``codec.action_ids``); ``ends`` from
    ``prefix_ends``. Tokens are scored at the sampling ``temperature`` and, with a turn ``grammar``,
    over the set the grammar would let the policy sample from, so a written token (a single allowed
    token, e.g. the toy's END) has probability 1 and is not counted in the mean (IGPO's length-
    normalized answer probability; for the toy codec, the probability of picking the answer action).
    Prefixes are the flat history (what the ``full`` context policy reads). Batched ``chunk`` rows at a time.
    """
    B = tokens.shape[0]
    rows, cols = np.nonzero(ends >= 0)
    out = torch.zeros(B, ends.shape[1], device=tokens.device)                        # (B, H + 1)
    for lo in range(0, len(rows), chunk):
        r, c = rows[lo:lo + chunk], cols[lo:lo + chunk]
        pre = [tokens[i, :ends[i, k]].tolist() for i, k in zip(r, c)]
        ans = [list(answers[i]) for i in r]
        L = max(len(p) + len(a) for p, a in zip(pre, ans))
        A = max(len(a) for a in ans)
        seq = torch.full((len(r), L), 0, dtype=torch.long, device=tokens.device)   # (N, L) right-padded
        attn = torch.zeros(len(r), L, dtype=torch.bool, device=tokens.device)
        at = torch.zeros(len(r), A, dtype=torch.long, device=tokens.device)          # (N, A) answer positions
        amask = torch.zeros(len(r), A, dtype=torch.bool, device=tokens.device)
        for n, (p, a) in enumerate(zip(pre, ans)):
            seq[n, :len(p) + len(a)] = torch.as_tensor(p + a, device=tokens.device)
            attn[n, :len(p) + len(a)] = True
            at[n, :len(a)] = torch.arange(len(p), len(p) + len(a), device=tokens.device)
            amask[n, :len(a)] = True
        allowed, decided = None, amask
        if grammar is not None and getattr(grammar, "constrain", False):
            ans_tok = seq.gather(1, at)                                               # (N, A)
            st = _grammar_states(grammar, ans_tok, amask)
            full = torch.full((len(r), L), -1, dtype=torch.long, device=tokens.device)
            full.scatter_(1, at, torch.where(amask, st, -1))
            allowed = grammar.allowed_at(full)                                        # (N, L, V)
            decided = amask & (grammar.table.to(st.device)[st.clamp(min=0)].sum(-1) > 1)
        lp, _ = policy.logprobs(seq, attn, allowed=allowed, temperature=temperature)  # (N, L)
        lp_a = lp.gather(1, at) * decided                                             # (N, A)
        p = torch.exp(lp_a.sum(1) / decided.sum(1).clamp(min=1))                      # (N,)
        out[torch.as_tensor(r, device=tokens.device), torch.as_tensor(c, device=tokens.device)] = p.float()
    return out


def privileged_reference(core, device=None) -> tuple[list, torch.Tensor]:
    """Each copy's privileged information (``core.privileged(i)``; reset ``core`` on the batch's tasks first)
    and the multi-hot of its reference solution over the env actions (B, A): SWEET-RL's critic input."""
    info = [core.privileged(i) for i in range(core.num_envs)]
    if any("reference_solution" not in d for d in info):
        raise ValueError("privileged_critic reads core.privileged(i)['reference_solution'] (a list of actions); "
                         f"{type(core).__name__}.privileged does not give it")
    return info, reference_features([d["reference_solution"] for d in info], core.n_actions, device)
