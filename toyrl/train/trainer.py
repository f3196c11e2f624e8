"""The trainer: envs + rollouts + an estimator + an objective -> a run log you can watch collapse.

    cfg = TrainConfig(env="bandit_chain", estimator="grpo", steps=60)
    log = train(cfg)                      # RunLog: one row of diagnostics per step
    log.to_pandas()[["step", "reward_mean", "reward_std", "zero_var_frac"]]

One step is the recipe, each line one call into the module that owns it:

    ro = self.collect()                    # toyrl.rollout.play.rollout: P tasks x G episodes -> TurnBatch
    got = self.provide(ro)                 # what the methods declare they need (critic values, ...)
    adv = self.advantages(ro, got)         # toyrl.credit: the estimator, (B, T) token advantages
    prep = self.prepare(ro, adv, got)      # filters, loss mask, rollout correction, behaviour / reference log-probs
    upd = self.update(ro, prep)            # per minibatch: objectives.policy_loss -> backward -> AdamW step

then a row of diagnostics (``log_row``). The config is resolved once, in ``__init__`` (``resolve_defaults``: the
policy's own context and learning rates), so every step reads plain values. Beside ``grad_norm`` each row logs
``update_norm``, the distance the weights moved (AdamW moves them on a zero gradient too: its momentum), and
``skipped_update``: ``skip_zero_adv`` takes no optimizer step when every loss-carrying advantage is exactly zero.

The off-policy regime is explicit: ``staleness`` rolls out with the weights of k steps ago, ``ppo_epochs`` x
``minibatches`` updates reuse each batch, and every row logs ``policy_lag_mean`` / ``policy_lag_max``, the
optimizer updates between the weights that sampled a batch and the weights that took each update. ``eval_every``
plays fresh independent episodes on a held-out task set with its own generators, so evaluation never changes the
training run. Same seed on CPU, same log (timing fields aside).

The sampler need not be the trainer: ``engine`` rolls out with a copy of the policy that samples as an inference
engine does (bf16 / fp16, int8 / int4 weights, logit noise, top-k / top-p, a lagging weight copy). The batch then
holds the engine's ``rollout_logp`` beside the trainer's ``old_logp``; ``correction`` reweights or drops tokens by
their ratio (TIS, MIS, ...), and every row logs the gap (``engine_kl``, ``engine_ratio_max``, per turn and per
token-probability bin).
"""
from __future__ import annotations

import copy
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Optional

import numpy as np
import torch

from ..codecs.toy import ThinkingIntervention
from ..credit import ESTIMATORS, warn_group_size, warn_zero_variance
from ..diagnostics import pool_loss_stats, stability_report
from ..envs import make_core
from ..filters import FILTERS
from ..objectives import CLIP_SCHEMES, loss_mask, policy_loss
from ..objectives.rollout_correction import correction_stats, rollout_correction
from ..rollout.flatten import Rollout, recompute_logp
from ..rollout.inference_engine import make_engine, sync_engine
from ..rollout.mismatch import mismatch_row
from ..rollout.play import Sampling, rollout
from ..rollout.tree import tree_rollout
from .bc import behaviour_clone
from .build import build_policy, policy_kwargs
from .config import TrainConfig, engine_strength
from .credit_models import CreditModels
from .defaults import fused_adamw, resolve_defaults
from .limits import check_context
from .optim import adamw, step_and_measure, update_norm, warmup_lr
from .runlog import RunLog
from .trackers import open_tracker
from .warm_critic import check_warmup, warm_critic
from .warmstart import apply_warmstart, load_warmstart

__all__ = ["TrainConfig", "RunLog", "Trainer", "Prepared", "train", "check_context", "warmup_lr", "update_norm"]


def _sampling(cfg: TrainConfig, generator) -> Sampling:
    tti = ThinkingIntervention(cfg.tti_delta, cfg.tti_window, cfg.tti_min_think) if cfg.tti_delta else None
    return Sampling(temperature=cfg.temperature, constrain=cfg.constrain, context=cfg.context,
                    context_k=cfg.context_k, tti=tti, t2po_eta=cfg.t2po_eta, generator=generator)


@dataclass
class Prepared:
    """What an update needs besides the rollout: advantages and the masks and log-probs it trains on."""

    adv: torch.Tensor
    """(B, T) token advantages"""
    lmask: torch.Tensor
    """(B, T) bool: tokens in the loss (env-token masking and filters applied)"""
    keep: torch.Tensor
    """(B,) bool: rows the filters kept"""
    old_logp: torch.Tensor
    """(B, T) behaviour log-probs (observation tokens scored once when they are trained on)"""
    ref_logp: Optional[torch.Tensor]
    logs: dict
    """filter counts and critic statistics for the row"""
    clip_inputs: dict = field(default_factory=dict)
    """per-rollout keyword inputs of the clip scheme, e.g. a2tgpo's z (B, H); sliced with each minibatch"""
    is_weights: Optional[torch.Tensor] = None
    """(B, T) the rollout correction's per-token weights (1 off the policy tokens; None: no correction)"""


class Trainer:
    """Holds the env core, the policy, the optimizer and the RNGs of one run; ``step()`` does one update."""

    def __init__(self, cfg: TrainConfig, log_path: Optional[str] = None):
        cfg.validate()
        warn_group_size(cfg.estimator, cfg.group_size)           # a grouped estimator on groups of one: all zeros
        self.cfg, self.device = cfg, torch.device(cfg.device)
        torch.manual_seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)
        self.mb_rng = np.random.default_rng([cfg.seed, 2])       # minibatch order, apart from the task stream
        self.gen = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.B = cfg.prompts_per_step * cfg.group_size
        self.env_kwargs = dict(cfg.env_kwargs, **({} if cfg.max_turns is None else {"max_turns": cfg.max_turns}))
        self.core = make_core(cfg.env, self.B, seed=cfg.seed, **self.env_kwargs)
        self.policy, self.codec = build_policy(cfg.policy, self.core, self.device, n_think=cfg.n_think,
                                               think_max=cfg.think_max, think_min=cfg.think_min,
                                               autocast=cfg.autocast, **policy_kwargs(cfg))
        self.cfg = cfg = resolve_defaults(cfg, self.policy)      # None: the policy's own context and learning rates
        check_context(self.policy, self.codec, self.core, cfg)  # ValueError if an episode can outgrow its positions
        self.sampling = _sampling(cfg, self.gen)
        self.opt = adamw(self.policy.parameters(), cfg.lr, fused=fused_adamw(cfg))
        self.ref = None
        self.version = 0                                         # optimizer updates taken so far
        strength = engine_strength(cfg)                          # the engine mode's parameter, typed (None: none)
        self.lag = cfg.staleness or (strength if cfg.engine == "lag" else 0)   # steps the sampling weights trail
        self.history = deque(maxlen=self.lag + 1)                # (version, weights) at the start of recent steps
        self.behaviour = copy.deepcopy(self.policy) if cfg.staleness else self.policy
        self.engine = make_engine(self.policy, cfg.engine, strength, seed=cfg.seed)   # exact: the policy
        if cfg.init is not None:                                 # a shipped or saved warm start (toyrl.train.warmstart)
            apply_warmstart(self, load_warmstart(cfg.init))
        self.step_idx = 0
        self.log = RunLog(log_path, asdict(cfg), tracker=open_tracker(cfg, log_path))   # cfg.logger: a tracker too
        self.needs = {n for _, _, needs in cfg.methods() for n in needs}   # toyrl.credit.NEEDS words
        self.use_critic = cfg.critic if cfg.critic is not None else bool(self.needs & {"values", "token_values"})
        self.models = CreditModels(cfg.critic_lr, cfg.critic_gamma, cfg.env, self.env_kwargs, cfg.seed)   # lazily built
        check_warmup(cfg.critic_warmup_steps, self.use_critic)   # ValueError: not an int >= 0, or no critic to warm
        self.eval_set = None                                     # (core, tasks, generator), built on first use

    # ---- data --------------------------------------------------------------------------------
    def sample(self, policy=None, greedy: bool = False, tasks=None) -> Rollout:
        cfg, G, P = self.cfg, self.cfg.group_size, self.cfg.prompts_per_step
        if tasks is None:
            tasks = np.repeat(self.core.sample_tasks(self.rng, P), G, 0)
        group = self.step_idx * P + np.repeat(np.arange(P), G)
        version = self.history[0][0] if self.history else self.version
        if cfg.rollout != "independent" and not greedy:
            return tree_rollout(policy or self.policy, self.core, tasks[::G], group[::G], codec=self.codec,
                                group_size=G, strategy=cfg.rollout, rng=self.rng, sampling=self.sampling,
                                policy_version=version, **cfg.tree_kwargs)
        s = self.sampling if not greedy else replace(self.sampling, greedy=True, tti=None, t2po_eta=0.0, generator=None)
        return rollout(policy or self.policy, self.core, tasks, group, codec=self.codec, sampling=s,
                       policy_version=version)

    # ---- one RL step: collect -> advantages -> loss -> optimizer step -------------------------
    def collect(self) -> Rollout:
        """Roll out P x G episodes with the rollout engine holding the behaviour weights (those of ``staleness``
        steps ago; the ``lag`` engine's own lag). ``rollout_logp``: what the engine sampled with; ``old_logp``: the
        trainer's behaviour weights on the same contexts (engine exact: the same numbers, not recomputed)."""
        self.policy.eval()
        if self.lag:
            self.history.append((self.version, copy.deepcopy(self.policy.state_dict())))
            if self.cfg.staleness:
                self.behaviour.load_state_dict(self.history[0][1])
        exact = self.cfg.engine == "exact"
        if not exact:
            sync_engine(self.engine, self.history[0][1] if self.lag else self.policy.state_dict(), self.cfg.engine)
        ro = self.sample(self.behaviour if exact else self.engine)
        b = ro.batch
        b.rollout_logp = b.old_logp.clone()                      # (B, T) the engine's log-probs
        if not exact and not self.cfg.bypass:                    # the trainer scores the engine's tokens itself
            with torch.no_grad():
                lp, _ = recompute_logp(self.behaviour, ro, "matched")
            b.old_logp = torch.where(b.policy_mask, lp, b.old_logp)
        return ro

    def provide(self, ro: Rollout) -> dict:
        """Every input the run's methods declare (``self.needs``, words of ``toyrl.credit.NEEDS``), fitted or
        measured on this batch (``CreditModels.provide``) -> {"estimator": keywords, "clip": keywords, "logs":
        run-log figures}; batch fields (values, info_gain, privileged) are set on ``ro.batch``."""
        cfg, mine = self.cfg, ESTIMATORS[self.cfg.estimator].needs
        got = self.models.provide(ro, self.needs, mine, policy=self.policy, codec=self.codec, values=self.use_critic,
                                  z="info_gain" in CLIP_SCHEMES[cfg.clip].needs and "z" not in cfg.clip_kwargs)
        if "greedy_baseline" in mine and "baseline_reward" not in cfg.estimator_kwargs:   # ReMax: one greedy episode
            got["estimator"]["baseline_reward"] = self.sample(greedy=True, tasks=ro.tasks).batch.outcome()
        return got

    def advantages(self, ro: Rollout, provided: Optional[dict] = None) -> torch.Tensor:
        """Token-level advantages (B, T) of the configured estimator (a turn value reaches the turn's observation
        tokens too), called with the keywords its needs were provided as (``provide(ro)["estimator"]``; None:
        provide them now) and the config's ``estimator_kwargs``."""
        est = ESTIMATORS[self.cfg.estimator]
        if provided is None:
            provided = self.provide(ro)["estimator"] if est.needs else {}
        adv = est(ro.batch, **provided, **self.cfg.estimator_kwargs)              # (B, H) or (B, T)
        return ro.batch.turn_to_token(adv) if est.level == "turn" else adv

    def prepare(self, ro: Rollout, adv: Optional[torch.Tensor] = None, got: Optional[dict] = None) -> Prepared:
        """What the update trains on: the advantages (None: ``advantages``), the filters' keep masks, the loss mask,
        the rollout correction, and the behaviour / reference log-probs. ``got``: ``provide(ro)`` (None: now)."""
        cfg, b = self.cfg, ro.batch
        got = self.provide(ro) if got is None else got
        adv = self.advantages(ro, got["estimator"]) if adv is None else adv
        keep, logs = torch.ones(b.B, dtype=torch.bool, device=self.device), dict(got["logs"])
        turn_keep = torch.ones_like(b.turn_mask)                 # (B, H) turn-level filters (t2po_resample)
        for name in cfg.filters:
            res = FILTERS[name](b, **cfg.filter_kwargs.get(name, {}))
            if FILTERS[name].level == "turn":
                turn_keep &= res.keep.to(self.device)
            else:
                keep &= res.keep.to(self.device)
            logs.update({f"filter_{name}_{k}": v for k, v in res.counts.items()})
        lmask = loss_mask(b.policy_mask, b.turn_id, cfg.mask_env_tokens) & keep[:, None]   # (B, T)
        if not bool(turn_keep.all()):
            lmask &= b.turn_to_token(turn_keep.float(), fill=1.0) > 0.5
        old_logp, ref_logp = b.old_logp, None
        with torch.no_grad():
            if not cfg.mask_env_tokens:                          # env tokens were never sampled: score them once
                lp_env, _ = recompute_logp(self.behaviour, ro, "flat")
                old_logp = torch.where(b.policy_mask, b.old_logp, lp_env)
            if cfg.kl and cfg.kl_coef:
                if self.ref is None:
                    self.ref = copy.deepcopy(self.policy).eval()
                ref_logp, _ = recompute_logp(self.ref, ro, "matched")
        is_w = None
        if cfg.correction != "none":                             # the engine / trainer gap, on the policy tokens
            pm = b.policy_mask & lmask
            w, keep_tok = rollout_correction(cfg.correction, b.old_logp, b.rollout_logp, pm, b.turn_id, H=b.H,
                                             adv=adv, **cfg.correction_kwargs)
            is_w, lmask = torch.where(pm, w, torch.ones_like(w)), lmask & (keep_tok | ~pm)
            logs.update({f"correction_{k}": v for k, v in correction_stats(w, keep_tok, pm).items()})
        return Prepared(adv, lmask, keep, old_logp, ref_logp, logs, got["clip"], is_w)

    def minibatch_loss(self, ro: Rollout, prep: Prepared, rows: Optional[torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """Recompute log-probs of ``rows`` (None: all) and their policy loss (+ entropy bonus)."""
        cfg = self.cfg
        sub = ro if rows is None else ro.select(rows)
        pick = (lambda x: x) if rows is None else (lambda x: None if x is None else x[rows])   # noqa: E731
        logp, ent = recompute_logp(self.policy, sub, cfg.recompute, env_tokens=not cfg.mask_env_tokens)   # (B, T)
        loss, info = policy_loss(logp, pick(prep.old_logp), pick(prep.adv), pick(prep.lmask), sub.batch.turn_id,
                                 ratio=cfg.ratio, clip=cfg.clip, agg=cfg.agg, clip_kwargs=cfg.clip_kwargs,
                                 ref_logp=pick(prep.ref_logp), kl=cfg.kl, kl_coef=cfg.kl_coef,
                                 rollout_logp=sub.batch.rollout_logp, is_weights=pick(prep.is_weights),
                                 H=sub.batch.H, adv_level="token",
                                 **{k: pick(v) for k, v in prep.clip_inputs.items()})   # a2tgpo's z (B, H)
        if cfg.entropy_coef:
            pm = sub.batch.policy_mask.float()
            loss = loss - cfg.entropy_coef * (ent * pm).sum() / pm.sum().clamp(min=1)
        return loss, info

    def update(self, ro: Rollout, prep: Prepared) -> dict:
        """``ppo_epochs`` passes over the batch, each in ``minibatches`` optimizer updates. ``loss`` and ``info``
        pool the loss statistics of all of them (``pool_loss_stats``: token-weighted means, min / max of extremes).
        ``update_norms``: how far each update moved the weights (0 where no step was taken); ``skipped``: True when
        ``skip_zero_adv`` found every loss-carrying advantage zero, so no update stepped (losses and gradients are
        still computed, for the row)."""
        cfg, B = self.cfg, ro.batch.B
        behaviour_version = ro.batch.policy_version[0].item() if ro.batch.policy_version is not None else self.version
        self.policy.train()
        skip = cfg.skip_zero_adv and not bool((prep.adv[prep.lmask] != 0).any())   # no token carries an advantage
        out, stats = {"lags": [], "grad_norms": [], "update_norms": [], "skipped": skip, "t_fwd": 0.0, "t_bwd": 0.0}, []
        for _ in range(cfg.ppo_epochs):
            order = self.mb_rng.permutation(B) if cfg.minibatches > 1 else np.arange(B)
            for chunk in np.array_split(order, cfg.minibatches):
                rows = None if cfg.minibatches == 1 else torch.as_tensor(np.sort(chunk), device=self.device)
                ta = time.perf_counter()
                loss, info = self.minibatch_loss(ro, prep, rows)
                tb = time.perf_counter()
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(),
                                                      cfg.grad_clip if cfg.grad_clip > 0 else float("inf"))
                out["lags"].append(self.version - behaviour_version)
                moved = 0.0
                if torch.isfinite(norm) and not skip:
                    if cfg.lr_warmup:
                        for g in self.opt.param_groups:
                            g["lr"] = warmup_lr(self.version, cfg.lr, cfg.lr_warmup)
                    with torch.no_grad():
                        moved = step_and_measure(self.opt)          # AdamW step, and how far it moved
                    self.version += 1
                out["update_norms"].append(moved)
                out["t_fwd"], out["t_bwd"] = out["t_fwd"] + tb - ta, out["t_bwd"] + time.perf_counter() - tb
                out["grad_norms"].append(norm.item())
                stats.append({"loss": loss.detach(), **{k: v for k, v in info.items()      # scalars and (H,) lists
                                                        if torch.is_tensor(v) and v.dim() <= 1}})
        self.opt.zero_grad(set_to_none=True)                     # freed now: rollout and forward run without them
        info = pool_loss_stats(stats, passes=cfg.ppo_epochs)     # every minibatch of every epoch, token-weighted
        out.update(loss=info["loss"], info=info)
        return out

    def step(self) -> dict:
        """One RL step: collect -> advantages -> loss -> optimizer step, then the run-log row."""
        if self.step_idx == 0 and self.cfg.critic_warmup_steps and "critic_warmup_losses" not in self.log.config:
            tw = time.perf_counter()                             # a warm critic: fitted on pi_0's episodes first
            self.log.config["critic_warmup_losses"] = warm_critic(self, self.cfg.critic_warmup_steps)
            self.log.config["critic_warmup_s"] = time.perf_counter() - tw
        t0 = time.perf_counter()
        ro = self.collect()                                      # P x G episodes -> ro.batch, a TurnBatch
        t1 = time.perf_counter()
        got = self.provide(ro)                                   # critic values, info gain, ... as declared
        adv = self.advantages(ro, got["estimator"])              # (B, T)
        prep = self.prepare(ro, adv, got)                        # loss mask, filters, behaviour log-probs
        t2 = time.perf_counter()
        upd = self.update(ro, prep)                              # policy_loss -> backward -> AdamW, per minibatch
        self.step_idx += 1
        row = self.log_row(ro, prep, upd, {"time_rollout": t1 - t0, "time_prep": t2 - t1,
                                           "time_recompute": upd["t_fwd"], "time_update": upd["t_bwd"]})
        if self.cfg.eval_every and (self.step_idx % self.cfg.eval_every == 0 or self.step_idx == self.cfg.steps):
            row.update(self.evaluate())
        self.log.append(row)
        warn_zero_variance(self.log.rows, self.cfg.steps)        # once: the first 10 (or all) steps had no variance
        return row

    def log_row(self, ro: Rollout, prep: Prepared, upd: dict, times: dict) -> dict:
        """The step's run-log row: the stability checklist plus training and timing figures."""
        b, info, lm = ro.batch, upd["info"], prep.lmask
        reasoning = self.codec.reasoning_mask(b.tokens) & b.policy_mask
        row = {"step": self.step_idx - 1, **stability_report(b, info)}
        n_turns = max(ro.stats.get("turns", 0), 1)
        row.update({
            "reward_mean": b.outcome().mean().item(), "success_rate": ro.success.float().mean().item(),
            "loss": upd["loss"].item(), "grad_norm": max(upd["grad_norms"]), "grad_norm_mean": float(np.mean(upd["grad_norms"])),
            "ratio_min": info["ratio_min"].item(), "ratio_max": info["ratio_max"].item(),
            "policy_lag_mean": float(np.mean(upd["lags"])), "policy_lag_max": int(max(upd["lags"])),
            "kept_frac": prep.keep.float().mean().item(),
            "adv_abs_mean": prep.adv[lm].abs().mean().item() if lm.any() else 0.0,
            "batch_size": b.B, "tokens_generated": ro.stats.get("tokens_generated", 0),
            "policy_tokens_per_turn": ro.stats.get("policy_tokens", 0) / n_turns,
            "reasoning_tokens_per_turn": float(reasoning.sum()) / n_turns,
            "obs_token_rate": ro.stats.get("obs_token_rate", 0.0), "tti_cut_rate": ro.stats.get("turns_cut", 0) / n_turns,
            **times, **prep.logs,
            "update_norm": max(upd["update_norms"]), "update_norm_mean": float(np.mean(upd["update_norms"])),
            "skipped_update": int(upd["skipped"]),
            **mismatch_row(b.old_logp, b.rollout_logp, b.policy_mask, b.turn_id, H=b.H),   # engine_kl, ...
        })
        return row

    def behaviour_clone(self, steps: int) -> list[float]:
        """``steps`` behaviour-cloning updates before RL (``toyrl.train.bc.behaviour_clone``) -> the losses."""
        return behaviour_clone(self, steps)

    def evaluate(self) -> dict:
        """``eval_episodes`` independent episodes on a fixed held-out task set (own core, RNG and torch
        generator; plain sampling: no trees, filters, T2PO or thinking intervention)."""
        cfg = self.cfg
        if self.eval_set is None:
            core = make_core(cfg.env, cfg.eval_episodes, seed=cfg.seed + 1_000_003, **self.env_kwargs)
            tasks = core.sample_tasks(np.random.default_rng([cfg.seed, 7]), cfg.eval_episodes)
            self.eval_set = (core, tasks, torch.Generator(device=self.device).manual_seed(cfg.seed + 7))
        core, tasks, gen = self.eval_set
        self.policy.eval()
        s = replace(self.sampling, greedy=cfg.eval_greedy, tti=None, t2po_eta=0.0, generator=gen)
        ro = rollout(self.policy, core, tasks, np.arange(len(tasks)), codec=self.codec, sampling=s)
        return {"eval_success_rate": ro.success.float().mean().item(),
                "eval_return": ro.batch.outcome().mean().item(),
                "eval_turns": ro.batch.turn_mask.sum(1).float().mean().item()}

    def run(self) -> RunLog:
        cfg = self.cfg
        if cfg.bc_steps:
            self.log.config["bc_losses"] = self.behaviour_clone(cfg.bc_steps)
        show = cfg.progress if cfg.progress is not None else sys.stderr.isatty()
        from tqdm.auto import tqdm
        bar = tqdm(range(cfg.steps), disable=not show, desc=f"{cfg.estimator}/{cfg.clip} on {cfg.env}")
        for _ in bar:
            row = self.step()
            bar.set_postfix(reward=f"{row['reward_mean']:.2f}", std=f"{row['reward_std']:.2f}")
        self.log.close()
        return self.log


def train(cfg: TrainConfig, log_path: Optional[str] = None) -> RunLog:
    """Run ``cfg`` and return its RunLog (also written to ``log_path`` as JSON lines if given)."""
    return Trainer(cfg, log_path).run()
