"""The checks of a run's configuration, run by ``TrainConfig.validate`` before any rollout: registry names, numbers
against ``RANGES``, every ``*_kwargs`` dict against the keyword parameters of the function it goes to (names, the
type of each default, ``KWARG_RANGES``), each method's declared needs against what the run can provide, and the
rollout engine with its correction. Each raises a one-line ValueError naming the field:

    validate(TrainConfig(estimator="grpo", estimator_kwargs={"bogus": 1}))
    # ValueError: estimator_kwargs: grpo takes no argument 'bogus'; it takes: ddof, eps, norm

The fields and their defaults are in ``toyrl.train.config``; the defaults that depend on the policy (learning
rates, context) are resolved in ``toyrl.train.defaults``.
"""
from __future__ import annotations

import dataclasses

from ..credit import ESTIMATORS, NEEDS
from ..envs import ENVS, make_core
from ..filters import FILTERS, loop_abs_adv, starpo_s, t2po_resample, void_turn, zero_variance
from ..objectives import CLIP_SCHEMES
from .. import plugins
from .build import check_grad_ckpt, check_policy_name, check_text_options
from ..policies.toy import PRESETS
from .kwargs import _is_number, _kind, check_kwargs, in_interval, keywords
from .trackers import check_logger
from .warmstart import WARMSTARTS, warmstart_path
from ..rollout.play import CONTEXTS
from ..rollout.inference_engine import ENGINES, check_engine
from ..objectives.rollout_correction import CORRECTIONS
from ..rollout.tree import STRATEGIES, tree_rollout

__all__ = ["validate", "check_names", "check_needs", "check_method_kwargs", "check_engine_fields", "methods", "RANGES",
           "BC_OPTIMIZERS", "AUTOCAST", "FILTER_FUNCTIONS", "ENV_SET", "TREE_SET", "engine_strength", "envs_providing",
           "filter_keywords"]


def validate(cfg) -> None:
    """Raise ValueError naming the field of the first unknown name or bad value (before any work starts):
    registry names, numbers against ``RANGES``, every ``*_kwargs`` against its function's keyword
    parameters (``check_kwargs``) and the env core built once with ``env_kwargs``."""
    check_names(cfg)
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    for name, interval in RANGES.items():
        v, kind = getattr(cfg, name), int if fields[name].type in ("int", "Optional[int]") else float
        if v is None and fields[name].type.startswith("Optional"):
            continue
        if not (_is_number(v, kind) and in_interval(v, interval)):
            raise ValueError(f"{name} must be {_kind(kind())} in {interval}, got {v!r}")
    check_method_kwargs(cfg)
    check_needs(cfg)
    if cfg.minibatches > cfg.group_size * cfg.prompts_per_step:
        raise ValueError(f"minibatches must be <= the batch size group_size * prompts_per_step = "
                         f"{cfg.group_size * cfg.prompts_per_step}, got {cfg.minibatches}")
    if not isinstance(cfg.skip_zero_adv, bool):
        raise ValueError(f"skip_zero_adv must be true or false, got {cfg.skip_zero_adv!r}")
    if cfg.bc_reasoning and (cfg.think_max < 1 or cfg.policy not in PRESETS):
        raise ValueError(f"bc_reasoning needs a toy policy preset with think_max >= 1 (room for the expert's "
                         f"reasoning), got policy={cfg.policy!r}, think_max={cfg.think_max}")
    if cfg.init is not None and not warmstart_path(cfg.init).is_file():
        raise ValueError(f"init must name a warm start ({', '.join(WARMSTARTS)}) or an existing checkpoint file, "
                         f"got {cfg.init!r} (no file at {warmstart_path(cfg.init)}; `toyrl warmstart` makes one)")
    if cfg.init is not None and cfg.bc_steps:
        raise ValueError(f"init and bc_steps are two warm starts: choose one (init={cfg.init!r}, "
                         f"bc_steps={cfg.bc_steps})")
    if cfg.bc_optimizer == "continue" and not cfg.bc_steps and cfg.init is None:
        raise ValueError("bc_optimizer='continue' needs bc_steps > 0 (it keeps the optimizer behaviour cloning "
                         "used, and with bc_steps=0 there is none); set bc_steps or bc_optimizer='fresh'")
    if cfg.think_min > cfg.think_max:
        raise ValueError(f"think_min must be <= think_max={cfg.think_max}, got {cfg.think_min}")
    check_text_options(cfg.policy, cfg.system, cfg.lora_r)   # system / lora_r need a text / hf policy
    if cfg.reply_tokens and cfg.policy in PRESETS:
        raise ValueError(f"reply_tokens applies to text policies (tinylm, hf:PATH, smollm2), got policy={cfg.policy!r}")
    check_grad_ckpt(cfg.policy, cfg.grad_ckpt)                # gradient checkpointing is the hf model's own
    if (cfg.tti_delta or cfg.think_min) and cfg.policy not in PRESETS:
        raise ValueError("tti_delta and think_min need a toy policy preset "
                         f"({', '.join(PRESETS)}); text policies have no END token")
    check_logger(cfg.logger)                              # "logger must be one of none, tensorboard, ..."
    if cfg.logger_dir is not None and not isinstance(cfg.logger_dir, str):
        raise ValueError(f"logger_dir must be a folder path (a string) or None, got {cfg.logger_dir!r}")
    if cfg.autocast not in AUTOCAST:
        raise ValueError(f"autocast must be one of {', '.join(map(str, AUTOCAST))}, got {cfg.autocast!r}")
    check_engine_fields(cfg)
    if cfg.autocast not in (None, "none", "fp32") and cfg.policy in PRESETS:
        raise ValueError(f"autocast applies to the language-model policies (tinylm, hf:PATH), not the toy "
                         f"preset {cfg.policy!r}")

def check_engine_fields(cfg) -> None:
    """The rollout engine and its correction: names, the strength, their keywords, one lag at a time."""
    if cfg.engine not in ENGINES:
        raise ValueError(f"unknown engine {cfg.engine!r}; valid: {', '.join(ENGINES)}")
    try:
        engine_strength(cfg)
    except ValueError as e:                                # "strength=0: engine mode 'topk' needs k, ..."
        raise ValueError(f"engine_strength: {e}") from None
    if cfg.engine == "lag" and cfg.staleness:
        raise ValueError(f"engine='lag' and staleness={cfg.staleness} are two lags of the sampling weights: "
                         "set one (engine lag: the trainer recomputes old_logp; staleness: it does not)")
    if cfg.bypass and cfg.correction != "none":
        raise ValueError(f"correction={cfg.correction!r} with bypass=True: bypass takes the engine's log-probs "
                         "as old_logp, so old_logp - rollout_logp is 0 and no correction acts; set bypass=False")
    if cfg.correction not in CORRECTIONS:
        raise ValueError(f"unknown correction {cfg.correction!r}; valid: {', '.join(CORRECTIONS)}")
    check_kwargs("correction_kwargs", cfg.correction, cfg.correction_kwargs,
                 dict(CORRECTIONS[cfg.correction].hyper))

def check_names(cfg) -> None:
    """Every registry name of ``cfg`` (env, estimator, clip, context, policy, filters, rollout, recompute,
    bc_optimizer) is one the registry holds."""
    for kind, name, valid in (("env", cfg.env, ENVS), ("estimator", cfg.estimator, ESTIMATORS),
                              ("clip", cfg.clip, CLIP_SCHEMES)):
        if plugins.unknown(kind, name, valid):                                 # entry points loaded first
            raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(valid)}; {plugins.hint(kind)}")
    if cfg.context not in CONTEXTS and cfg.context is not None:                 # context None: the policy's own
        raise ValueError(f"unknown context {cfg.context!r}; valid: {', '.join(CONTEXTS)}")
    check_policy_name(cfg.policy)                         # "policy 'hf:/x': path /x does not exist"
    if not isinstance(cfg.filters, (list, tuple)):
        raise ValueError(f"filters must be a list of filter names, got {cfg.filters!r}")
    for f in cfg.filters:
        if f not in FILTERS:
            raise ValueError(f"unknown filter {f!r}; valid: {', '.join(FILTERS)}")
    if cfg.rollout not in ("independent",) + STRATEGIES:
        raise ValueError(f"unknown rollout {cfg.rollout!r}; valid: independent, {', '.join(STRATEGIES)}")
    if cfg.recompute not in ("matched", "flat"):
        raise ValueError(f"recompute must be matched or flat, got {cfg.recompute!r}")
    if cfg.bc_optimizer not in BC_OPTIMIZERS:
        raise ValueError(f"bc_optimizer must be one of {', '.join(BC_OPTIMIZERS)}, got {cfg.bc_optimizer!r}")

def methods(cfg) -> list:
    """[(kind, name, needs)] of the run's estimator, clip scheme and filters (names already checked)."""
    return ([("estimator", cfg.estimator, ESTIMATORS[cfg.estimator].needs),
             ("clip", cfg.clip, CLIP_SCHEMES[cfg.clip].needs)]
            + [("filter", f, FILTERS[f].needs) for f in cfg.filters])

def check_needs(cfg) -> None:
    """A one-line ValueError for the first method whose declared need (``toyrl.credit.NEEDS``) this run
    cannot provide: nothing builds it yet, the env's core lacks the method it reads, or critic=False."""
    core_cls = ENVS[cfg.env][1]
    for kind, name, needs in methods(cfg):
        for n in needs:
            need = NEEDS[n]
            what = f"{need.short} ({n})" if need.short else n
            if not need.built:
                raise ValueError(f"{kind} {name!r} needs {what}; none is built yet, so choose another {kind}")
            if need.env_method and not hasattr(core_cls, need.env_method):
                ok = envs_providing([n])
                fix = f"use env={ok[0]!r} (--env {ok[0]})" if ok else "no registered env provides it"
                raise ValueError(f"{kind} {name!r} needs {what}, which env {cfg.env!r} cannot provide (its core "
                                 f"has no {need.env_method}()); {fix}")
            if n in ("values", "token_values") and cfg.critic is False:
                raise ValueError(f"{kind} {name!r} needs a value critic ({n}) but critic=False turns it off; "
                                 f"set critic to None or True (--critic none)")

def check_method_kwargs(cfg) -> None:
    """Every ``*_kwargs`` dict of ``cfg`` against the keyword parameters of the function it goes to
    (``check_kwargs``), and the env core built once with ``env_kwargs``."""
    est, scheme = ESTIMATORS[cfg.estimator], CLIP_SCHEMES[cfg.clip]
    check_kwargs("estimator_kwargs", cfg.estimator, cfg.estimator_kwargs, keywords(est.fn))
    try:
        scheme.resolve(cfg.clip, cfg.clip_kwargs if isinstance(cfg.clip_kwargs, dict) else {})
    except ValueError as e:                                # the scheme's own check of its keyword names
        raise ValueError(f"clip_kwargs: {e}") from None
    check_kwargs("clip_kwargs", cfg.clip, cfg.clip_kwargs, scheme.hyperparameters())
    check_kwargs("tree_kwargs", "tree_rollout", cfg.tree_kwargs, keywords(tree_rollout, TREE_SET, closed=True))
    for name, kw in cfg.filter_kwargs.items():
        if name not in FILTERS:
            raise ValueError(f"filter_kwargs: unknown filter {name!r}; valid: {', '.join(FILTERS)}")
        check_kwargs("filter_kwargs", name, kw, filter_keywords(name))
    core_cls = ENVS[cfg.env][1]
    check_kwargs("env_kwargs", cfg.env, cfg.env_kwargs, keywords(core_cls.__init__, ENV_SET))
    try:                                                   # the core's own checks (map_name, slip, ...)
        make_core(cfg.env, 1, seed=0, **dict(cfg.env_kwargs, **({} if cfg.max_turns is None
                                                                             else {"max_turns": cfg.max_turns})))
    except (ValueError, TypeError) as e:
        raise ValueError(f"env_kwargs: {e}") from None


BC_OPTIMIZERS = ("fresh", "continue")
"""the values of bc_optimizer: RL's AdamW after behaviour cloning is a new one, or BC's own"""
AUTOCAST = (None, "none", "fp32", "bf16", "fp16")
"""the autocast values toyrl.train.build takes"""

RANGES = {"group_size": "[1, 4096]", "prompts_per_step": "[1, 4096]", "steps": "[0, 1e7]", "ppo_epochs": "[1, 1000]",
          "minibatches": "[1, 4096]", "n_think": "[1, 256]", "think_max": "[0, 256]", "think_min": "[0, 256]",
          "staleness": "[0, 1000]", "eval_every": "[0, 1e7]", "eval_episodes": "[1, 65536]", "context_k": "[1, 1e4]",
          "tti_delta": "[0, 10]", "tti_window": "[1, 256]", "tti_min_think": "[0, 256]", "t2po_eta": "[0, 10]",
          "kl_coef": "[0, 1e6]", "grad_clip": "[0, 1e9]", "bc_steps": "[0, 1e6]", "bc_noise": "[0, 1]", "max_turns": "[1, 1e4]",
          "lr_warmup": "[0, 1e7]", "lora_r": "[0, 4096]", "reply_tokens": "[0, 4096]", "critic_warmup_steps": "[0, 1e7]",
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


def engine_strength(cfg):
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
