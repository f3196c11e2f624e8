"""The run's configuration: every switch of a toyrl training run, one dataclass field each.

    cfg = TrainConfig(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 16},
                      n_think=32, think_max=32, estimator="gigpo", clip="turn_ppo", steps=80)

The CLI builds its flags from these fields (their docstrings are the help text); notebooks build
a config directly. ``validate`` checks names against the registries and numbers against
``RANGES`` before any rollout.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .credit import ESTIMATORS
from .envs import ENVS
from .filters import FILTERS
from .objectives import CLIP_SCHEMES
from .policies.factory import is_policy_name, policy_names
from .policies.toy import PRESETS
from .rollout import CONTEXTS
from .tree import STRATEGIES

__all__ = ["TrainConfig", "RANGES"]


@dataclass
class TrainConfig:
    """Everything a run depends on. The CLI builds one from flags; notebooks build one directly."""

    env: str = "gridworld"
    """environment: gridworld | bandit_chain | mock_search"""
    env_kwargs: dict = field(default_factory=dict)
    """arguments of the env core (e.g. {"map_name": "4x4", "slip": 0.1})"""
    policy: str = "tiny"
    """policy name: a toy transformer preset (tiny | small | base), tinylm[:PATH] (a text policy) or
    hf:PATH (a local Hugging Face causal LM); see toyrl.policies.factory"""
    autocast: Optional[str] = None
    """None or "bf16": autocast the forwards of tinylm / hf policies"""
    n_think: int = 2
    """distinct reasoning tokens in the toy vocabulary"""
    think_max: int = 0
    """reasoning tokens a turn may hold before END and its action (toy: a turn is at most think_max + 2
    tokens, 0 = no reasoning; text policies: think_max extra reply tokens for free-text reasoning)"""
    think_min: int = 0
    """reasoning tokens a toy turn writes before END may be sampled (LLM-style min_tokens; 0: none)"""
    estimator: str = "grpo"
    """advantage estimator, a name of toyrl.credit.ESTIMATORS"""
    estimator_kwargs: dict = field(default_factory=dict)
    """its keyword hyperparameters (e.g. {"gamma": 0.95, "omega": 1.0})"""
    clip: str = "ppo"
    """clipping scheme, a name of toyrl.objectives.CLIP_SCHEMES"""
    clip_kwargs: dict = field(default_factory=dict)
    """its keyword hyperparameters (e.g. {"eps_high": 0.28})"""
    ratio: Optional[str] = None
    """importance-ratio level: token | turn | sequence | trajectory (None: the scheme's own)"""
    agg: Optional[str] = None
    """loss aggregation, a name of toyrl.objectives.AGGREGATIONS (None: the scheme's own)"""
    kl: Optional[str] = None
    """KL estimator to a frozen reference policy (k1 | abs | k2 | k3 ...); None: no KL term"""
    kl_coef: float = 0.0
    """weight of the KL term"""
    mask_env_tokens: bool = True
    """keep observation tokens out of the loss and the KL (Search-R1); False trains on them too"""
    filters: list = field(default_factory=list)
    """filters applied before the update, names of toyrl.filters.FILTERS (e.g. ["starpo_s"])"""
    filter_kwargs: dict = field(default_factory=dict)
    """per filter keyword arguments, e.g. {"starpo_s": {"p": 0.25}}"""
    context: str = "full"
    """what the policy reads each turn: full | last_k | summary"""
    context_k: int = 2
    """turns kept in full by last_k and summary"""
    recompute: str = "matched"
    """trainer-side log-probs: matched (the rollout's own contexts) | flat (full history: the mismatch)"""
    group_size: int = 8
    """G: rollouts per task (one group)"""
    prompts_per_step: int = 8
    """P: tasks per step"""
    ppo_epochs: int = 1
    """passes over each batch"""
    minibatches: int = 1
    """optimizer updates per pass: the batch's rows split into this many minibatches"""
    lr: float = 3e-3
    """AdamW learning rate"""
    grad_clip: float = 1.0
    """max gradient norm (0: no clipping; the norm is logged either way)"""
    entropy_coef: float = 0.0
    """entropy bonus on policy tokens"""
    temperature: float = 1.0
    """sampling temperature of rollouts"""
    max_turns: Optional[int] = None
    """turn limit (None: the env's own; otherwise passed to the env as max_turns)"""
    constrain: bool = True
    """sample through the turn grammar (reasoning, END, action); False: the whole vocabulary, so the
    policy can write observation tokens and malformed (void) turns"""
    staleness: int = 0
    """roll out with the policy of this many steps ago (async drift; policy_lag logs it in updates)"""
    t2po_eta: float = 0.0
    """T2PO turn resampling: regenerate a turn whose uncertainty moved by less than this (0: off)"""
    tti_delta: float = 0.0
    """T2PO thinking intervention: cut the reasoning when its uncertainty moves by less than this
    for tti_window tokens in a row (0: off; toy policies only)"""
    tti_window: int = 3
    """reasoning tokens in a row with a small uncertainty change before the cut"""
    tti_min_think: int = 4
    """reasoning tokens before a cut is allowed"""
    eval_every: int = 0
    """evaluate on fresh independent episodes every this many steps, and after the last (0: never)"""
    eval_episodes: int = 64
    """episodes per evaluation (one per task of a fixed held-out set drawn from the seed)"""
    eval_greedy: bool = False
    """evaluate with argmax decoding (False: sample at the training temperature)"""
    rollout: str = "independent"
    """independent | tree (Tree-GRPO) | arpo (entropy branching) | patr (process-scored branching),
    trees at the token budget of group_size independent episodes"""
    tree_kwargs: dict = field(default_factory=dict)
    """tree_rollout arguments, e.g. {"n_init": 4, "branch": 4, "tau": 0.5, "beta": 0.2}"""
    critic: Optional[bool] = None
    """fit a turn-level value critic on the policy's hidden states (None: when the estimator needs values)"""
    critic_lr: float = 1e-2
    """critic learning rate"""
    critic_gamma: float = 1.0
    """discount of the critic's Monte Carlo return targets"""
    bc_steps: int = 0
    """behaviour-cloning steps on expert demonstrations before RL"""
    bc_lr: float = 3e-3
    """learning rate of behaviour cloning"""
    steps: int = 100
    """RL steps"""
    seed: int = 0
    """seed of tasks, sampling and initialization"""
    device: str = "cpu"
    """torch device (cuda works unchanged)"""
    progress: Optional[bool] = None
    """tqdm progress bar (None: only when stderr is a terminal)"""

    def validate(self) -> None:
        """Raise ValueError naming the first unknown name or bad value (before any work starts)."""
        for kind, name, valid in (("env", self.env, ENVS), ("estimator", self.estimator, ESTIMATORS),
                                  ("clip", self.clip, CLIP_SCHEMES), ("context", self.context, CONTEXTS)):
            if name not in valid:
                raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(valid)}")
        if not is_policy_name(self.policy):
            raise ValueError(f"unknown policy {self.policy!r}; valid: {', '.join(policy_names())}")
        for f in self.filters:
            if f not in FILTERS:
                raise ValueError(f"unknown filter {f!r}; valid: {', '.join(FILTERS)}")
        if self.rollout not in ("independent",) + STRATEGIES:
            raise ValueError(f"unknown rollout {self.rollout!r}; valid: independent, {', '.join(STRATEGIES)}")
        if self.recompute not in ("matched", "flat"):
            raise ValueError(f"recompute must be matched or flat, got {self.recompute!r}")
        for name, lo, hi in RANGES:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
                raise ValueError(f"{name} must be a number in [{lo}, {hi}], got {v!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        if self.minibatches > self.group_size * self.prompts_per_step:
            raise ValueError(f"minibatches must be <= the batch size group_size * prompts_per_step = "
                             f"{self.group_size * self.prompts_per_step}, got {self.minibatches}")
        if self.think_min > self.think_max:
            raise ValueError(f"think_min must be <= think_max={self.think_max}, got {self.think_min}")
        if (self.tti_delta or self.think_min) and self.policy not in PRESETS:
            raise ValueError("tti_delta and think_min need a toy policy preset "
                             f"({', '.join(PRESETS)}); text policies have no END token")


RANGES = (("group_size", 1, 4096), ("prompts_per_step", 1, 4096), ("steps", 0, 10**7), ("ppo_epochs", 1, 1000),
          ("minibatches", 1, 4096), ("n_think", 1, 256), ("think_max", 0, 256), ("think_min", 0, 256), ("staleness", 0, 1000),
          ("eval_every", 0, 10**7), ("eval_episodes", 1, 65536), ("context_k", 1, 10**4),
          ("tti_delta", 0.0, 10.0), ("tti_window", 1, 256), ("tti_min_think", 0, 256), ("t2po_eta", 0.0, 10.0),
          ("kl_coef", 0.0, 1e6), ("grad_clip", 0.0, 1e9), ("bc_steps", 0, 10**6))
"""(field, lowest, highest): the numeric fields and their valid ranges"""
