"""The run's configuration: every switch of a toyrl training run, one dataclass field each.

    cfg = TrainConfig(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 16},
                      n_think=32, think_max=32, estimator="gigpo", clip="turn_ppo", steps=80)

The CLI builds its flags from these fields (their docstrings are the help text); notebooks build
a config directly. ``validate`` checks, before any rollout, names against the registries, numbers against ``RANGES``
and every ``*_kwargs`` dict against the keyword parameters of the function it goes to (names, the
type of each default, ``KWARG_RANGES``):

    TrainConfig(estimator="grpo", estimator_kwargs={"bogus": 1}).validate()
    # ValueError: estimator_kwargs: grpo takes no argument 'bogus'; it takes: ddof, eps, norm
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from ..credit import ESTIMATORS, NEEDS
from ..envs import ENVS, make_core
from ..filters import FILTERS, loop_abs_adv, starpo_s, t2po_resample, void_turn, zero_variance
from ..objectives import CLIP_SCHEMES
from .build import check_policy_name, check_text_options
from ..policies.toy import PRESETS
from .kwargs import KWARG_RANGES, _is_number, _kind, check_kwargs, in_interval, keywords
from .trackers import check_logger
from .warmstart import WARMSTARTS, warmstart_path
from ..rollout.engine import CONTEXTS
from ..rollout.engines import ENGINES, check_engine
from ..objectives.rollout_correction import CORRECTIONS
from ..rollout.tree import STRATEGIES, tree_rollout

__all__ = ["TrainConfig", "RANGES", "KWARG_RANGES", "check_kwargs", "keywords", "in_interval", "envs_providing",
           "engine_strength"]


@dataclass
class TrainConfig:
    """Everything a run depends on. The CLI builds one from flags; notebooks build one directly."""

    env: str = "gridworld"
    """environment: gridworld | bandit_chain | mock_search"""
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
    lora_r: int = 0
    """LoRA rank of an hf policy (hf:PATH, smollm2): only rank-r adapters on every linear layer train (alpha = 2 r,
    needs peft: pip install 'toyrl[lora]'); 0: every weight trains"""
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
    """RL's AdamW learning rate; None: the policy's own (toyrl.train.optim.LR: 3e-3 for toy presets and TinyLM, 1e-5
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
    """the rollout engine that samples the episodes, a name of toyrl.rollout.engines.ENGINES: exact (the trainer's
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
    bc_steps: int = 0
    """behaviour-cloning steps on expert demonstrations before RL"""
    bc_lr: Optional[float] = None
    """learning rate of behaviour cloning; None: the policy's own (toyrl.train.optim.BC_LR: 3e-3 for toy presets and
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
        """Raise ValueError naming the field of the first unknown name or bad value (before any work starts):
        registry names, numbers against ``RANGES``, every ``*_kwargs`` against its function's keyword
        parameters (``check_kwargs``) and the env core built once with ``env_kwargs``."""
        self._check_names()
        for name, interval in RANGES.items():
            v, kind = getattr(self, name), int if FIELDS[name].type in ("int", "Optional[int]") else float
            if v is None and FIELDS[name].type.startswith("Optional"):
                continue
            if not (_is_number(v, kind) and in_interval(v, interval)):
                raise ValueError(f"{name} must be {_kind(kind())} in {interval}, got {v!r}")
        self._check_kwargs()
        self._check_needs()
        if self.minibatches > self.group_size * self.prompts_per_step:
            raise ValueError(f"minibatches must be <= the batch size group_size * prompts_per_step = "
                             f"{self.group_size * self.prompts_per_step}, got {self.minibatches}")
        if not isinstance(self.skip_zero_adv, bool):
            raise ValueError(f"skip_zero_adv must be true or false, got {self.skip_zero_adv!r}")
        if self.bc_reasoning and (self.think_max < 1 or self.policy not in PRESETS):
            raise ValueError(f"bc_reasoning needs a toy policy preset with think_max >= 1 (room for the expert's "
                             f"reasoning), got policy={self.policy!r}, think_max={self.think_max}")
        if self.init is not None and not warmstart_path(self.init).is_file():
            raise ValueError(f"init must name a warm start ({', '.join(WARMSTARTS)}) or an existing checkpoint file, "
                             f"got {self.init!r} (no file at {warmstart_path(self.init)}; `toyrl warmstart` makes one)")
        if self.init is not None and self.bc_steps:
            raise ValueError(f"init and bc_steps are two warm starts: choose one (init={self.init!r}, "
                             f"bc_steps={self.bc_steps})")
        if self.bc_optimizer == "continue" and not self.bc_steps and self.init is None:
            raise ValueError("bc_optimizer='continue' needs bc_steps > 0 (it keeps the optimizer behaviour cloning "
                             "used, and with bc_steps=0 there is none); set bc_steps or bc_optimizer='fresh'")
        if self.think_min > self.think_max:
            raise ValueError(f"think_min must be <= think_max={self.think_max}, got {self.think_min}")
        check_text_options(self.policy, self.system, self.lora_r)   # system / lora_r need a text / hf policy
        if (self.tti_delta or self.think_min) and self.policy not in PRESETS:
            raise ValueError("tti_delta and think_min need a toy policy preset "
                             f"({', '.join(PRESETS)}); text policies have no END token")
        check_logger(self.logger)                              # "logger must be one of none, tensorboard, ..."
        if self.logger_dir is not None and not isinstance(self.logger_dir, str):
            raise ValueError(f"logger_dir must be a folder path (a string) or None, got {self.logger_dir!r}")
        if self.autocast not in AUTOCAST:
            raise ValueError(f"autocast must be one of {', '.join(map(str, AUTOCAST))}, got {self.autocast!r}")
        self._check_engine()
        if self.autocast not in (None, "none", "fp32") and self.policy in PRESETS:
            raise ValueError(f"autocast applies to the language-model policies (tinylm, hf:PATH), not the toy "
                             f"preset {self.policy!r}")

    def _check_engine(self) -> None:
        """The rollout engine and its correction: names, the strength, their keywords, one lag at a time."""
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; valid: {', '.join(ENGINES)}")
        try:
            engine_strength(self)
        except ValueError as e:                                # "strength=0: engine mode 'topk' needs k, ..."
            raise ValueError(f"engine_strength: {e}") from None
        if self.engine == "lag" and self.staleness:
            raise ValueError(f"engine='lag' and staleness={self.staleness} are two lags of the sampling weights: "
                             "set one (engine lag: the trainer recomputes old_logp; staleness: it does not)")
        if self.bypass and self.correction != "none":
            raise ValueError(f"correction={self.correction!r} with bypass=True: bypass takes the engine's log-probs "
                             "as old_logp, so old_logp - rollout_logp is 0 and no correction acts; set bypass=False")
        if self.correction not in CORRECTIONS:
            raise ValueError(f"unknown correction {self.correction!r}; valid: {', '.join(CORRECTIONS)}")
        check_kwargs("correction_kwargs", self.correction, self.correction_kwargs,
                     dict(CORRECTIONS[self.correction].hyper))

    def _check_names(self) -> None:
        for kind, name, valid in (("env", self.env, ENVS), ("estimator", self.estimator, ESTIMATORS),
                                  ("clip", self.clip, CLIP_SCHEMES), ("context", self.context, CONTEXTS)):
            if name not in valid and not (kind == "context" and name is None):     # context None: the policy's own
                raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(valid)}")
        check_policy_name(self.policy)                         # "policy 'hf:/x': path /x does not exist"
        if not isinstance(self.filters, (list, tuple)):
            raise ValueError(f"filters must be a list of filter names, got {self.filters!r}")
        for f in self.filters:
            if f not in FILTERS:
                raise ValueError(f"unknown filter {f!r}; valid: {', '.join(FILTERS)}")
        if self.rollout not in ("independent",) + STRATEGIES:
            raise ValueError(f"unknown rollout {self.rollout!r}; valid: independent, {', '.join(STRATEGIES)}")
        if self.recompute not in ("matched", "flat"):
            raise ValueError(f"recompute must be matched or flat, got {self.recompute!r}")
        if self.bc_optimizer not in BC_OPTIMIZERS:
            raise ValueError(f"bc_optimizer must be one of {', '.join(BC_OPTIMIZERS)}, got {self.bc_optimizer!r}")

    def methods(self) -> list:
        """[(kind, name, needs)] of the run's estimator, clip scheme and filters (names already checked)."""
        return ([("estimator", self.estimator, ESTIMATORS[self.estimator].needs),
                 ("clip", self.clip, CLIP_SCHEMES[self.clip].needs)]
                + [("filter", f, FILTERS[f].needs) for f in self.filters])

    def _check_needs(self) -> None:
        """A one-line ValueError for the first method whose declared need (``toyrl.credit.NEEDS``) this run
        cannot provide: nothing builds it yet, the env's core lacks the method it reads, or critic=False."""
        core_cls = ENVS[self.env][1]
        for kind, name, needs in self.methods():
            for n in needs:
                need = NEEDS[n]
                what = f"{need.short} ({n})" if need.short else n
                if not need.built:
                    raise ValueError(f"{kind} {name!r} needs {what}; none is built yet, so choose another {kind}")
                if need.env_method and not hasattr(core_cls, need.env_method):
                    ok = envs_providing([n])
                    fix = f"use env={ok[0]!r} (--env {ok[0]})" if ok else "no registered env provides it"
                    raise ValueError(f"{kind} {name!r} needs {what}, which env {self.env!r} cannot provide (its core "
                                     f"has no {need.env_method}()); {fix}")
                if n in ("values", "token_values") and self.critic is False:
                    raise ValueError(f"{kind} {name!r} needs a value critic ({n}) but critic=False turns it off; "
                                     f"set critic to None or True (--critic none)")

    def _check_kwargs(self) -> None:
        est, scheme = ESTIMATORS[self.estimator], CLIP_SCHEMES[self.clip]
        check_kwargs("estimator_kwargs", self.estimator, self.estimator_kwargs, keywords(est.fn))
        try:
            scheme.resolve(self.clip, self.clip_kwargs if isinstance(self.clip_kwargs, dict) else {})
        except ValueError as e:                                # the scheme's own check of its keyword names
            raise ValueError(f"clip_kwargs: {e}") from None
        check_kwargs("clip_kwargs", self.clip, self.clip_kwargs, scheme.hyperparameters())
        check_kwargs("tree_kwargs", "tree_rollout", self.tree_kwargs, keywords(tree_rollout, TREE_SET, closed=True))
        for name, kw in self.filter_kwargs.items():
            if name not in FILTERS:
                raise ValueError(f"filter_kwargs: unknown filter {name!r}; valid: {', '.join(FILTERS)}")
            check_kwargs("filter_kwargs", name, kw, filter_keywords(name))
        core_cls = ENVS[self.env][1]
        check_kwargs("env_kwargs", self.env, self.env_kwargs, keywords(core_cls.__init__, ENV_SET))
        try:                                                   # the core's own checks (map_name, slip, ...)
            make_core(self.env, 1, seed=0, **dict(self.env_kwargs, **({} if self.max_turns is None
                                                                                 else {"max_turns": self.max_turns})))
        except (ValueError, TypeError) as e:
            raise ValueError(f"env_kwargs: {e}") from None


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
BC_OPTIMIZERS = ("fresh", "continue")
"""the values of bc_optimizer: RL's AdamW after behaviour cloning is a new one, or BC's own"""
AUTOCAST = (None, "none", "fp32", "bf16", "fp16")
"""the autocast values toyrl.train.build takes"""

RANGES = {"group_size": "[1, 4096]", "prompts_per_step": "[1, 4096]", "steps": "[0, 1e7]", "ppo_epochs": "[1, 1000]",
          "minibatches": "[1, 4096]", "n_think": "[1, 256]", "think_max": "[0, 256]", "think_min": "[0, 256]",
          "staleness": "[0, 1000]", "eval_every": "[0, 1e7]", "eval_episodes": "[1, 65536]", "context_k": "[1, 1e4]",
          "tti_delta": "[0, 10]", "tti_window": "[1, 256]", "tti_min_think": "[0, 256]", "t2po_eta": "[0, 10]",
          "kl_coef": "[0, 1e6]", "grad_clip": "[0, 1e9]", "bc_steps": "[0, 1e6]", "bc_noise": "[0, 1]", "max_turns": "[1, 1e4]",
          "lr_warmup": "[0, 1e7]", "lora_r": "[0, 4096]",
          "lr": "(0, inf)", "critic_lr": "(0, inf)", "bc_lr": "(0, inf)", "entropy_coef": "[0, 1e6]",
          "temperature": "(0, inf)", "critic_gamma": "[0, 1]", "seed": "[0, 1e18]"}
"""field -> its valid interval ("(" / ")" exclude the bound; an Optional field may also be None)"""

FILTER_FUNCTIONS = {"zero_variance": zero_variance, "starpo_s": starpo_s, "void_turn": void_turn,
                    "loop_abs_adv": loop_abs_adv, "t2po_resample": t2po_resample}
"""the function each ``FILTERS`` entry passes its keyword arguments on to"""
ENV_SET = ("seed",)
"""env core arguments the Trainer sets itself (num_envs is positional)"""
TREE_SET = ("codec", "group_size", "strategy", "rng", "sampling", "policy_version")
"""tree_rollout arguments the Trainer sets itself (its own sampling, so tree_rollout's **sampling_kw never apply)"""


def engine_strength(cfg: TrainConfig):
    """``cfg.engine``'s parameter as its mode takes it (its default if None; an integer for topk and lag, which a
    flag gives as 2.0), or a ValueError naming what is valid. Example: engine="topk", engine_strength=3.0 -> 3."""
    s = cfg.engine_strength
    if cfg.engine in ("topk", "lag") and _is_number(s) and float(s).is_integer():
        s = int(s)
    return check_engine(cfg.engine, s)


def envs_providing(needs) -> list:
    """Names of the registered envs (``ENVS`` order) whose core has every env method ``needs`` read
    (``NEEDS[n].env_method``). Example: envs_providing(["info_gain"]) -> ["mock_search"];
    envs_providing([]) -> every env."""
    methods = [NEEDS[n].env_method for n in needs if NEEDS[n].env_method]
    return [e for e, (_, cls) in ENVS.items() if all(hasattr(cls, m) for m in methods)]


def filter_keywords(name: str):
    """The keywords of filter ``name``: its FILTERS entry's own plus those of the function it calls."""
    own = keywords(FILTERS[name].fn, drop=("batch",), closed=True)
    if keywords(FILTERS[name].fn) is not None:
        return own
    return None if name not in FILTER_FUNCTIONS else {**own, **keywords(FILTER_FUNCTIONS[name])}
