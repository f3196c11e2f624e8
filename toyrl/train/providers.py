"""What the trainer's loop is fed, apart from the loop itself (``toyrl.train.trainer``): the inputs each method
declares (``provide``: critic values, information gain, a greedy baseline, ...), the advantages, and ``prepare``,
which turns a rollout into what an update trains on (``Prepared``: advantages, the loss mask after env-token
masking, filters and the rollout correction, behaviour and reference log-probs); behaviour cloning before RL; and
evaluation on fresh held-out episodes.

``Providers`` is the base class of ``Trainer``: its methods read the trainer's state (``self.cfg``, ``self.policy``,
``self.codec``, ``self.core``, ``self.models``, the RNGs) and are called as ``trainer.prepare(ro)`` and so on.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np
import torch

from ..credit import ESTIMATORS
from ..envs import make_core
from ..envs.experts import DEMO_CONFIGS, expert_memo, load_demos, noisy_expert
from ..filters import FILTERS
from ..objectives import CLIP_SCHEMES, loss_mask
from ..objectives.rollout_correction import correction_stats, rollout_correction
from ..policies.scripted import ScriptedPolicy, replay_chooser
from ..rollout.play import Rollout, recompute_logp, rollout
from .bc import bc_loss
from .defaults import fused_adamw
from .optim import adamw

__all__ = ["Prepared", "Providers"]


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


class Providers:
    """The trainer's inputs: what each method needs, advantages, the prepared batch, behaviour cloning and
    evaluation (the loop, ``collect -> prepare -> update``, is ``toyrl.train.trainer.Trainer``)."""

    def provide(self, ro) -> dict:
        """Every input the run's methods declare (``self.needs``, words of ``toyrl.credit.NEEDS``), fitted or
        measured on this batch (``credit_models.CreditModels.provide``) -> {"estimator": keywords, "clip":
        keywords, "logs": run-log figures}; batch fields (values, info_gain, privileged) set on ``ro.batch``."""
        cfg, mine = self.cfg, ESTIMATORS[self.cfg.estimator].needs
        got = self.models.provide(ro, self.needs, mine, policy=self.policy, codec=self.codec, values=self.use_critic,
                                  z="info_gain" in CLIP_SCHEMES[cfg.clip].needs and "z" not in cfg.clip_kwargs)
        if "greedy_baseline" in mine and "baseline_reward" not in cfg.estimator_kwargs:   # ReMax: one greedy episode
            got["estimator"]["baseline_reward"] = self.sample(greedy=True, tasks=ro.tasks).batch.outcome()
        return got

    def advantages(self, ro, provided: Optional[dict] = None) -> torch.Tensor:
        """Token-level advantages (B, T) from the configured estimator (turn values reach observation tokens too),
        called with the keywords its declared needs were provided as (``provide(ro)["estimator"]``; None: provide
        them now) and the config's ``estimator_kwargs`` (which win)."""
        est = ESTIMATORS[self.cfg.estimator]
        if provided is None:
            provided = self.provide(ro)["estimator"] if est.needs else {}
        adv = est(ro.batch, **{**provided, **self.cfg.estimator_kwargs})
        return ro.batch.turn_to_token(adv) if est.level == "turn" else adv

    def prepare(self, ro: Rollout) -> Prepared:
        """What the methods need (``provide``), advantages, filters, and the behaviour / reference log-probs."""
        cfg = self.cfg
        got = self.provide(ro)
        b = ro.batch
        adv = self.advantages(ro, got["estimator"])
        keep, logs = torch.ones(b.B, dtype=torch.bool, device=self.device), dict(got["logs"])
        turn_keep = torch.ones_like(b.turn_mask)                 # (B, H) turn-level filters (t2po_resample)
        for name in cfg.filters:
            res = FILTERS[name](b, **cfg.filter_kwargs.get(name, {}))
            if FILTERS[name].level == "turn":
                turn_keep &= res.keep.to(self.device)
            else:
                keep &= res.keep.to(self.device)
            logs.update({f"filter_{name}_{k}": v for k, v in res.counts.items()})
        lmask = loss_mask(b.policy_mask, b.turn_id, cfg.mask_env_tokens) & keep[:, None]
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

    # ---- behaviour cloning before RL ---------------------------------------------------------------
    def behaviour_clone(self, steps: int) -> list[float]:
        """``steps`` updates of NLL on expert turns: shipped demos when they fit this env's settings (and
        ``bc_noise`` is 0), else the planner on freshly drawn tasks (a random action with probability ``bc_noise``) (writing ``expert_memo`` as reasoning with ``bc_reasoning``).
        Returns the losses. With ``bc_optimizer="continue"`` RL goes on with this AdamW (``self.opt``: its moment
        estimates and step count kept, its lr set to ``lr``)."""
        cfg, losses = self.cfg, []
        demos = None
        if cfg.env in DEMO_CONFIGS and cfg.env_kwargs == DEMO_CONFIGS[cfg.env] and not cfg.bc_noise:   # demos' settings
            try:
                demos = load_demos(cfg.env)
            except FileNotFoundError:
                demos = None
        opt = adamw(self.policy.parameters(), cfg.bc_lr, fused=fused_adamw(cfg))
        s = replace(self.sampling, temperature=1.0, tti=None, t2po_eta=0.0, generator=None)    # the expert's turns
        memo = expert_memo if cfg.bc_reasoning else None                 # what the expert writes as reasoning
        for _ in range(steps):
            if demos:
                pick = self.rng.choice(len(demos), self.B)
                tasks = np.array([demos[i]["task"] for i in pick])
                choose = replay_chooser([demos[i]["actions"] for i in pick])
            else:
                tasks, choose = self.core.sample_tasks(self.rng, self.B), noisy_expert(cfg.bc_noise, self.rng)
            expert = ScriptedPolicy(self.core, self.codec, choose, self.device, reason=memo)
            ro = rollout(expert, self.core, tasks, np.arange(self.B), codec=self.codec, sampling=s)
            logp, _ = recompute_logp(self.policy, ro, "matched")
            loss = bc_loss(logp, ro.batch.policy_mask)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        if cfg.bc_optimizer == "continue":
            for g in opt.param_groups:
                g["lr"] = cfg.lr
            self.opt = opt
        return losses

    # ---- evaluation on fresh episodes ------------------------------------------------------------
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
