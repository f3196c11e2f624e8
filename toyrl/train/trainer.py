"""The trainer: envs + rollouts + an estimator + an objective -> a run log you can watch collapse.

    cfg = TrainConfig(env="bandit_chain", estimator="grpo", steps=60)
    log = train(cfg)                      # RunLog: one row of diagnostics per step
    log.to_pandas()[["step", "reward_mean", "reward_std", "zero_var_frac"]]

One step is three plain functions:

    ro = self.collect()          # P tasks x G rollouts with the behaviour policy (staleness steps old)
    prep = self.prepare(ro)      # critic, advantages, filters, behaviour / reference log-probs
    upd = self.update(ro, prep)  # ppo_epochs x minibatches of: recompute -> policy_loss -> AdamW

then a row of diagnostics. This module is the loop; what feeds it (``provide``, ``advantages``, ``prepare``,
behaviour cloning, evaluation) is ``toyrl.train.providers``, the base class of ``Trainer``. Beside ``grad_norm``
each row logs ``update_norm``, the distance the weights moved (AdamW moves them on a zero gradient too: its
momentum), and ``skipped_update``: ``skip_zero_adv`` takes no optimizer step when every loss-carrying advantage is
exactly zero. After behaviour cloning, RL's AdamW is a fresh one or BC's own (``bc_optimizer``), its lr optionally
warmed up (``lr_warmup``, ``warmup_lr``).

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
from dataclasses import asdict, replace
from typing import Optional

import numpy as np
import torch

from .config import TrainConfig, engine_strength
from ..credit import warn_group_size, warn_zero_variance
from .credit_models import CreditModels
from .warmstart import apply_warmstart, load_warmstart
from .warm_critic import check_warmup, warm_critic
from ..diagnostics import pool_loss_stats, stability_report
from ..envs import make_core
from ..objectives import policy_loss
from .build import build_policy, policy_kwargs
from .defaults import fused_adamw, resolve_defaults
from .limits import check_context
from ..rollout.play import Rollout, Sampling, recompute_logp, rollout
from ..rollout.inference_engine import make_engine, sync_engine
from ..rollout.mismatch import mismatch_row
from .optim import adamw, step_and_measure, update_norm, warmup_lr
from .providers import Prepared, Providers
from .runlog import RunLog
from .trackers import open_tracker
from ..codecs.toy import ThinkingIntervention
from ..rollout.tree import tree_rollout

__all__ = ["TrainConfig", "RunLog", "Trainer", "Prepared", "train", "check_context", "warmup_lr", "update_norm"]


def _sampling(cfg: TrainConfig, generator) -> Sampling:
    tti = ThinkingIntervention(cfg.tti_delta, cfg.tti_window, cfg.tti_min_think) if cfg.tti_delta else None
    return Sampling(temperature=cfg.temperature, constrain=cfg.constrain, context=cfg.context,
                    context_k=cfg.context_k, tti=tti, t2po_eta=cfg.t2po_eta, generator=generator)


class Trainer(Providers):
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

    # ---- one RL step: collect -> prepare -> update ---------------------------------------------
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

    def minibatch_loss(self, ro: Rollout, prep: Prepared, rows: Optional[torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """Recompute log-probs of ``rows`` (None: all) and their policy loss (+ entropy bonus)."""
        cfg = self.cfg
        sub = ro if rows is None else ro.select(rows)
        pick = (lambda x: x) if rows is None else (lambda x: None if x is None else x[rows])   # noqa: E731
        logp, ent = recompute_logp(self.policy, sub, cfg.recompute, env_tokens=not cfg.mask_env_tokens)
        ref = pick(prep.ref_logp)
        loss, info = policy_loss(logp, pick(prep.old_logp), pick(prep.adv), pick(prep.lmask), sub.batch.turn_id,
                                 ratio=cfg.ratio, clip=cfg.clip, agg=cfg.agg,
                                 clip_kwargs={**cfg.clip_kwargs, **{k: pick(v) for k, v in prep.clip_inputs.items()}},
                                 ref_logp=ref, kl=cfg.kl if ref is not None else None, kl_coef=cfg.kl_coef,
                                 rollout_logp=sub.batch.rollout_logp, is_weights=pick(prep.is_weights),
                                 H=sub.batch.H, adv_level="token")
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
                        moved = step_and_measure(self.opt)          # AdamW: read from its state, no weight copy
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
        if self.step_idx == 0 and self.cfg.critic_warmup_steps and "critic_warmup_losses" not in self.log.config:
            tw = time.perf_counter()                             # a warm critic: fitted on pi_0's episodes first
            self.log.config["critic_warmup_losses"] = warm_critic(self, self.cfg.critic_warmup_steps)
            self.log.config["critic_warmup_s"] = time.perf_counter() - tw
        t0 = time.perf_counter()
        ro = self.collect()
        t1 = time.perf_counter()
        prep = self.prepare(ro)
        t2 = time.perf_counter()
        upd = self.update(ro, prep)
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
