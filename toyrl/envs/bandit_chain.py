"""BanditChain: K stages, M arms each; only the right arms advance. The hello world of per-turn credit.

The outcome depends on every turn: a sparse +1 arrives only after K correct pulls, so one
trajectory-level advantage cannot tell the turn that found the right arm from the one that
wasted a pull. The anchor state is simply the stage, so GiGPO groups turns by stage.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from gymnasium import spaces

from .core import VOID, BatchedCore, CoreEnv, mix64, parse_bracket_action

__all__ = ["BanditCore", "BanditChainEnv", "ON_WRONG"]

ON_WRONG = ("stay", "restart", "end")


class BanditCore(BatchedCore):
    """N BanditChain copies stepped with numpy; see ``BanditChainEnv`` for the rules."""

    def __init__(self, num_envs: int, *, stages: int = 4, arms: int = 4, good_arms: int = 1,
                 on_wrong: str = "stay", dense: bool = False, max_turns: Optional[int] = None,
                 void_penalty: float = 0.0, layout_seed: Optional[int] = None, show_layout: bool = False,
                 lures: int = 0, seed: Optional[int] = None):
        super().__init__(num_envs, seed)
        if stages < 1 or arms < 2 or not 1 <= good_arms < arms:
            raise ValueError(f"need stages >= 1, arms >= 2 and 1 <= good_arms < arms, got "
                             f"stages={stages}, arms={arms}, good_arms={good_arms}")
        if not 0 <= lures <= arms - good_arms - 1:
            raise ValueError(f"lures must lie in [0, arms - good_arms - 1] = [0, {arms - good_arms - 1}] (a stage keeps at "
                             f"least one plain wrong arm), got {lures}")
        if on_wrong not in ON_WRONG:
            raise ValueError(f"on_wrong must be one of {ON_WRONG}, got {on_wrong!r}")
        if show_layout and good_arms != 1:
            raise ValueError(f"show_layout=True shows one good arm per stage: it needs good_arms=1, got {good_arms}")
        self.K, self.M, self.good_arms, self.show_layout = stages, arms, good_arms, bool(show_layout)
        self.lures = int(lures)
        self.on_wrong, self.dense = on_wrong, dense
        self.max_turns = int(max_turns) if max_turns is not None else 2 * stages
        self.void_penalty = float(void_penalty)
        self.n_actions = arms
        self.task_dim = stages * arms
        self.layout_seed = layout_seed

    def sample_tasks(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.layout_seed is not None:        # one fixed layout: a bandit the policy can learn by heart
            one = self._draw_layouts(np.random.default_rng(self.layout_seed), 1)
            return np.repeat(one, n, 0)
        return self._draw_layouts(rng, n)

    def _draw_layouts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        # per stage, a random set of good_arms arms advance (1) and the next `lures` ranks are lures (2): argsort
        # of uniforms picks them without loops (lures=0 draws exactly the layouts it always drew)
        ranks = np.argsort(rng.random((n, self.K, self.M)), axis=2).argsort(axis=2)   # (n, K, M)
        lure = (ranks >= self.good_arms) & (ranks < self.good_arms + self.lures)
        return ((ranks < self.good_arms) + 2 * lure).astype(np.int64).reshape(n, -1)  # (n, K*M)

    def reset(self, tasks: np.ndarray) -> np.ndarray:
        good = self._check_tasks(tasks)
        if not ((good.reshape(-1, self.K, self.M) == 1).sum(2) >= 1).all() or not np.isin(good, (0, 1, 2)).all():
            raise ValueError("tasks: every stage needs at least one good arm (a 1 in each row of M; 2 marks a lure, "
                             "0 a wrong arm)")
        N = self.num_envs
        self.state = self.episode_state(
            good=good.copy(),                                       # (N, K*M)
            layout_hash=mix64(*good.T),                             # (N,)
            stage=np.zeros(N, np.int64),
            last=np.full(N, 3, np.int64))                           # feedback: 0 right, 1 wrong, 2 void, 3 none
        return self.obs()

    def step(self, actions):
        a = self._check_actions(actions)
        st, N = self.state, self.num_envs
        live = ~st["done"]
        void = live & (a == VOID)
        stage = st["stage"]
        cell = np.minimum(stage, self.K - 1) * self.M + np.maximum(a, 0)
        right = live & ~void & (st["good"][np.arange(N), cell] == 1)
        lured = live & ~void & (st["good"][np.arange(N), cell] == 2)               # "found something", no progress
        wrong = live & ~void & ~right & ~lured                                       # a lure never ends or restarts
        new_stage = stage + right
        if self.on_wrong == "restart":
            new_stage = np.where(wrong, 0, new_stage)
        st["stage"] = new_stage
        st["last"] = np.where(void, 2, np.where(right, 0, 1)) * live + 3 * ~live
        success = live & (new_stage >= self.K)
        terminated = success | (wrong if self.on_wrong == "end" else np.zeros(N, bool))
        truncated = self.end_turn(live, terminated)
        reward = ((right | lured) / self.K) if self.dense else success.astype(np.float64)
        reward = reward - self.void_penalty * void
        info = {"void": void, "success": success, "right": right}
        if self.lures:
            info["found"] = right | lured                                          # the turn signal a lure farms
        return self.obs(), reward, terminated, truncated, info

    def obs(self) -> np.ndarray:
        return self.state["stage"].copy()

    def state_keys(self) -> np.ndarray:
        return mix64(self.state["layout_hash"], self.state["stage"])

    def memo(self, i: int = 0) -> list[int]:
        """What copy i must carry forward when it cannot see its prompt again (a blind context): the good arm
        of every stage still ahead, the remaining plan. Example: good arms (2, 0, 3) at stage 1 -> [0, 3]."""
        return self.oracle_actions(i)

    # ---- token view for a small-vocabulary policy: feedback ids 0..3, stage ids 4..4+K, arm ids after ----
    @property
    def obs_vocab_size(self) -> int:
        return 4 + self.K + 1 + (self.M if self.show_layout else 0)

    def prompt_tokens(self, i: int = 0) -> list[int]:
        """The start stage; with ``show_layout`` also the good arm of every stage, in order (the plan)."""
        plan = [5 + self.K + a for a in self.oracle_actions(i)] if self.show_layout else []
        return [4 + int(self.state["stage"][i])] + plan

    def obs_tokens(self, i: int = 0) -> list[int]:
        """Feedback on the pull (right / wrong / void) and the new stage."""
        return [int(self.state["last"][i]), 4 + int(self.state["stage"][i])]

    def render_text(self, i: int = 0) -> str:
        st = self.state
        return (f"Stage {int(st['stage'][i])} of {self.K}. {self.M} arms: pull[0] ... pull[{self.M - 1}]. "
                f"Turn {int(st['turn'][i])} of {self.max_turns}.")

    def parse_action(self, text: str, i: int = 0) -> Optional[int]:
        got = parse_bracket_action(text)
        if got is None or got[0] != "pull" or not got[1].isdigit():
            return None
        arm = int(got[1])
        return arm if arm < self.M else None

    def action_text(self, action: int, i: int = 0) -> str:
        return f"pull[{action}]"

    def oracle_actions(self, i: int = 0) -> list[int]:
        """A shortest successful action sequence for copy i from its current stage."""
        good = self.state["good"][i].reshape(self.K, self.M)
        return [int(np.flatnonzero(good[k] == 1)[0]) for k in range(int(self.state["stage"][i]), self.K)]


class BanditChainEnv(CoreEnv):
    """Pull the right arm at each of K stages in a row.

    ## Description
    A chain of ``stages`` stages. At each turn the agent pulls one of ``arms`` arms; at every stage
    ``good_arms`` of them (drawn per task from the reset seed) advance to the next stage. A wrong
    pull stays at the stage (``on_wrong="stay"``), goes back to stage 0 (``"restart"``) or ends the
    episode (``"end"``). The episode succeeds when the last stage is passed.

    ## Action Space
    ``Discrete(arms)``: the arm to pull. Text form ``pull[2]``; ``step(None)`` is a void turn.

    ## Observation Space
    ``Discrete(stages + 1)``: the current stage (``stages`` once solved).

    ## Rewards
    Sparse (default): +1 when the chain is completed. Dense (``dense=True``): +1/K for every
    advancing pull. ``-void_penalty`` on a void turn.

    A farmable turn reward (``lures`` >= 1): at every stage ``lures`` of the wrong arms are lures. A lure
    "finds something": its pull is reported in ``info["found"]`` exactly like a right pull (the turn signal
    MT-GRPO reads) and, with ``dense=True``, pays the same +1/K; but it never advances the stage, so a
    policy can farm the signal forever without coming nearer to the outcome (Wei et al., arXiv 2505.11821:
    a turn reward not aligned with the outcome gets optimized locally). A lure never ends or restarts the
    chain; its feedback token reads "wrong".

    With ``show_layout=True`` the prompt lists the good arm of every stage (the plan), and only the
    prompt: a policy whose context drops it after turn 0 (``context="blind"``) must carry the rest of
    the plan in its own reasoning (``memo()``). With ``on_wrong="end"`` a policy that forgets the plan
    solves a K-stage chain with probability (1/M)^(K-1) at best.

    ## Episode End
    Terminated on completion (or on a wrong pull with ``on_wrong="end"``); truncated after
    ``max_turns`` turns (default 2 K).

    ## Arguments
    ``stages=4``, ``arms=4``, ``good_arms=1``, ``on_wrong="stay"``, ``dense=False``,
    ``max_turns=None``, ``void_penalty=0.0``, ``layout_seed=None`` (an int fixes one layout for
    every task, drawn from that seed: a bandit to learn by heart rather than to explore per task),
    ``show_layout=False`` (the plan in the prompt; needs ``good_arms=1``), ``lures=0`` (lure arms per stage, at most
    ``arms - good_arms - 1``; a task row marks a good arm 1, a lure 2, a wrong arm 0).

    ## Version History
    - v0: first version (``show_layout`` and ``lures`` added later; the layouts drawn without lures unchanged).
    """

    core_cls = BanditCore

    def __init__(self, render_mode: Optional[str] = None, **kwargs):
        super().__init__(render_mode, **kwargs)
        self.observation_space = spaces.Discrete(self.core.K + 1)
        self.action_space = spaces.Discrete(self.core.M)

    def _obs(self, obs):
        return int(obs[0])
