"""The run's configuration: every switch of a toyrl training run, one dataclass field each.

    cfg = TrainConfig(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 16},
                      n_think=32, think_max=32, estimator="gigpo", clip="turn_ppo", steps=80)

The CLI builds its flags from these fields (their docstrings are the help text); notebooks build
a config directly. Three modules side by side: this one holds the fields and their defaults; ``toyrl.train.checks``
what ``validate`` checks before any rollout (names against the registries, numbers against ``RANGES``, every
``*_kwargs`` dict against the keyword parameters of the function it goes to: names, the type of each default,
``KWARG_RANGES``); ``toyrl.train.defaults`` the defaults that depend on the policy (``lr``, ``bc_lr``, ``context``
left None here), resolved in one place once the policy is built (``resolve_defaults``). A bad value fails at once:

    TrainConfig(estimator="grpo", estimator_kwargs={"bogus": 1}).validate()
    # ValueError: estimator_kwargs: grpo takes no argument 'bogus'; it takes: ddof, eps, norm
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from . import checks
from .checks import (AUTOCAST, BC_OPTIMIZERS, ENV_SET, FILTER_FUNCTIONS, RANGES, TREE_SET, engine_strength,
                     envs_providing, filter_keywords)
from .kwargs import KWARG_RANGES, check_kwargs, in_interval, keywords

__all__ = ["TrainConfig", "RANGES", "KWARG_RANGES", "check_kwargs", "keywords", "in_interval", "envs_providing",
           "engine_strength", "filter_keywords", "FIELDS", "BC_OPTIMIZERS", "AUTOCAST", "FILTER_FUNCTIONS", "ENV_SET",
           "TREE_SET"]


@dataclass
class TrainConfig:
    """Everything a run depends on. The CLI builds one from flags; notebooks build one directly."""

    env: str = "gridworld"
    """environment: gridworld | bandit_chain | mock_search | doors"""
    env_kwargs: dict = field(default_factory=dict)
    """arguments of the env core (e.g. {"map_name": "4x4", "slip": 0.1})"""
    policy: str = "tiny"
    """policy name: a toy transformer preset (tiny | small | base), tinylm[:PATH] (a text policy), hf:PATH (a local
    Hugging Face causal LM) or a zoo model (smollm2: `toyrl models fetch smollm2` first); see toyrl.train.build"""
    autocast: Optional[str] = None
    """None or "bf16": autocast the forwards of tinylm / hf policies"""
    system: str = ""
    """an instruction put before the first observation of a text policy (tinylm, hf:PATH, smollm2), e.g. "Reply
    with pull[N] and nothing else."; a real LLM needs one to know the reply format (toy presets: must be empty)"""
    reply_tokens: int = 0
    """most tokens of a text policy's reply (tinylm, hf:PATH, smollm2), before think_max's room for reasoning; 0: the
    policy's own (tinylm 8, hf 24). A reply that has not closed its action by then is parsed as it stands"""
    lora_r: int = 0
    """LoRA rank of an hf policy (hf:PATH, smollm2): only rank-r adapters on every linear layer train (alpha = 2 r,
    needs peft: pip install 'toyrl[lora]'); 0: every weight trains"""
    grad_ckpt: bool = False
    """gradient checkpointing of an hf policy (hf:PATH, smollm2): each decoder block keeps only its input for backward
    and recomputes the rest there, for about one more forward of time: the update's activations shrink from every
    intermediate of every block to one (B, T, d) tensor per block (toyrl.policies.hf_load)"""
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
    """clipping scheme, a name of toyrl.objectives.CLIP_SCHEMES. With ppo_epochs = minibatches = 1 and the trainer as
    its own engine every ratio is exactly 1, so a scheme acts only through how it weights tokens: turn_ppo's updates
    equal ppo's there (the ledger's turn_critic)"""
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
    context: Optional[str] = None
    """what the policy reads each turn: full | last_k | summary; None: the policy's own (a TinyLM
    checkpoint records the context it was trained with, and its context_k), otherwise full"""
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
    lr: Optional[float] = None
    """RL's AdamW learning rate; None: the policy's own (toyrl.train.defaults.LR: 3e-3 for toy presets and TinyLM, 1e-5
    for a pretrained hf policy, 1e-4 for its LoRA adapters)"""
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
    engine: str = "exact"
    """the rollout engine that samples the episodes, a name of toyrl.rollout.inference_engine.ENGINES: exact (the trainer's
    own weights and kernels) | bf16 | fp16 | int8 | int4 | noise | topk | topp | lag. With any other the batch keeps
    the engine's log-probs as rollout_logp and the trainer recomputes old_logp on the same contexts, so even an
    on-policy step is off-policy (the training-inference mismatch)"""
    engine_strength: Optional[float] = None
    """the engine mode's parameter, None: its default (noise: sigma; topk: k; topp: p; lag: updates behind)"""
    bypass: bool = False
    """verl's bypass mode: take the engine's log-probs as old_logp (no trainer recompute), so PPO's ratio is
    pi_theta / pi_engine from the first update and the gap enters the clip (False: the decoupled objective, the
    trainer rescores the engine's tokens; a correction then reweights by pi_old / pi_engine)"""
    correction: str = "none"
    """rollout correction of the engine / trainer gap, a name of toyrl.objectives.rollout_correction.CORRECTIONS
    (none | tis | mis | icepop | turn_tis | seq_tis | seq_mis | geo_rs ...): per-token weights and a keep mask from
    old_logp - rollout_logp, applied to the policy loss"""
    correction_kwargs: dict = field(default_factory=dict)
    """its keyword hyperparameters (e.g. {"upper": 3.0}: the truncation or mask bound C)"""
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
    """fit a turn-level value critic on the policy's hidden states (None: when a method declares the need
    "values", see toyrl.credit.NEEDS; the other learned models follow their methods' needs)"""
    critic_lr: float = 1e-2
    """critic learning rate"""
    critic_gamma: float = 1.0
    """discount of the critic's Monte Carlo return targets"""
    critic_warmup_steps: int = 0
    """a warm critic: before RL step 0 (after behaviour cloning or init), fit the value critic for this many
    regression steps, each on a fresh batch of P x G episodes of the frozen starting policy, on the returns it is
    fitted to in RL (toyrl.train.warm_critic; the episodes use their own env core and generators, so the RL run's
    task and sampling streams are those of a run without it); 0: the critic starts from its initialization at RL's
    start; needs a value critic (an estimator that declares "values" or critic=True)"""
    bc_steps: int = 0
    """behaviour-cloning steps on expert demonstrations before RL"""
    bc_lr: Optional[float] = None
    """learning rate of behaviour cloning; None: the policy's own (toyrl.train.defaults.BC_LR: 3e-3 for toy presets and
    TinyLM, 1e-4 for a pretrained hf policy, 1e-3 for its LoRA adapters)"""
    bc_noise: float = 0.0
    """an imperfect teacher: with this probability behaviour cloning's planner plays a uniformly random action instead
    of its own (toyrl.envs.experts.noisy_expert), so the clone starts with a per-turn error rate; planner demos only"""
    init: Optional[str] = None
    """start from a warm start instead of behaviour cloning here: a shipped name (toyrl.train.warmstart.WARMSTARTS:
    tmaze, plan_chain; data/checkpoints/NAME.pt) or a file written by `toyrl warmstart`; its weights, and with
    bc_optimizer=continue its BC optimizer's state. Its settings (env, env_kwargs, policy, n_think, think_max,
    context, context_k) must be this run's"""
    bc_reasoning: bool = False
    """behaviour cloning's expert writes reasoning before each action: what the task asks to remember
    (toyrl.envs.experts.expert_memo: a T-maze's cue, a chain's remaining plan), as reasoning tokens, so the
    cloned policy learns to carry it through a blind context; needs a toy policy with think_max >= 1"""
    bc_optimizer: str = "fresh"
    """the AdamW that RL starts with after behaviour cloning: fresh (zero moment estimates) | continue (the one
    BC used, its moments and step count kept, its lr set to lr); continue needs bc_steps > 0"""
    lr_warmup: int = 0
    """linear RL learning-rate warmup over this many optimizer updates (not steps): update k (0-based, skipped
    updates not counted) uses lr * min(1, (k + 1) / lr_warmup), see toyrl.train.trainer.warmup_lr; 0: lr throughout"""
    skip_zero_adv: bool = False
    """take no policy optimizer step at all on a step whose advantages are all exactly zero on the loss-carrying
    tokens (every group silent, or no token left in the loss): AdamW's momentum would otherwise still move the
    weights with a zero gradient. Skip means skip: with kl_coef or entropy_coef > 0 such a step would otherwise
    still move through the KL / entropy terms, and it does not move either (learned credit models such as a critic
    still fit). The row logs skipped_update (0 / 1)"""
    steps: int = 100
    """RL steps"""
    seed: int = 0
    """seed of tasks, sampling and initialization"""
    device: str = "cpu"
    """torch device (cuda works unchanged)"""
    logger: str = "none"
    """a run tracker that gets every run-log row as it is written, the config as its hyperparameters: none |
    tensorboard | wandb | trackio (each an extra: pip install 'toyrl[tensorboard]'); the JSON-lines log stays the
    record; see toyrl.train.trackers"""
    logger_dir: Optional[str] = None
    """the folder the tracker writes to (None: beside the run log, <its folder>/<logger>; runs/<logger> without one);
    trackio: sets $TRACKIO_DIR to it before trackio's first import, one trackio folder per process"""
    progress: Optional[bool] = None
    """tqdm progress bar (None: only when stderr is a terminal)"""

    def validate(self) -> None:
        """Raise ValueError naming the field of the first unknown name or bad value, before any work starts
        (``toyrl.train.checks.validate``)."""
        checks.validate(self)

    def methods(self) -> list:
        """[(kind, name, needs)] of the run's estimator, clip scheme and filters (``toyrl.train.checks.methods``)."""
        return checks.methods(self)


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
