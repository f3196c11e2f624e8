"""The trainer: envs + rollouts + an estimator + an objective -> a run log you can watch collapse.

    cfg = TrainConfig(env="bandit_chain", estimator="grpo", steps=60)
    log = train(cfg)                      # RunLog: one row of diagnostics per step
    log.to_pandas()[["step", "reward_mean", "reward_std", "zero_var_frac"]]

One step: draw P tasks, roll out G episodes each (B = P * G), compute advantages with any
registered estimator, apply filters, then ``ppo_epochs`` passes of recompute + ``policy_loss``
(any ratio level, clip scheme, aggregation, KL, env-token masking) + AdamW. Same seed on CPU,
same log (timing fields aside).
"""
from __future__ import annotations

import copy
import json
import math
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .credit import ESTIMATORS
from .demos import DEMO_CONFIGS, ScriptedPolicy, bc_loss, expert_actions, load_demos, replay_chooser
from .diagnostics import stability_report
from .envs import ENVS, make_core
from .filters import FILTERS
from .objectives import CLIP_SCHEMES, loss_mask, policy_loss
from .policies.factory import build_policy, is_policy_name, policy_names
from .credit.critics import TurnCritic, value_loss
from .rollout import CONTEXTS, Rollout, recompute_logp, rollout
from .textcodec import TextCodec, TextExpert
from .tree import STRATEGIES, tree_rollout

__all__ = ["TrainConfig", "RunLog", "Trainer", "train", "CRITIC_ESTIMATORS"]

CRITIC_ESTIMATORS = ("gae", "turn_gae", "bilevel_gae")


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
    """distinct thinking tokens in the vocabulary"""
    think_max: int = 2
    """thinking tokens a turn may hold before its action (a turn writes at most think_max + 2 tokens)"""
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
    """sample policy turns only from thinking / action / EOT tokens (False: any token, more void turns)"""
    staleness: int = 0
    """train on rollouts from the policy of this many updates ago (async drift)"""
    t2po_eta: float = 0.0
    """T2PO turn resampling: regenerate a turn whose uncertainty moved by less than this (0: off)"""
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
        """Raise ValueError naming the first unknown name or bad value."""
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
        if self.group_size < 1 or self.prompts_per_step < 1 or self.steps < 0:
            raise ValueError("group_size and prompts_per_step must be >= 1 and steps >= 0")


class RunLog:
    """One row of metrics per step, appended to a JSON-lines file (flushed every row) and kept in memory."""

    def __init__(self, path: Optional[str] = None, config: Optional[dict] = None):
        self.rows: list[dict] = []
        self.config = config or {}
        self.path = Path(path) if path else None
        self._f = None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "w")

    def append(self, row: dict) -> None:
        row = {k: _plain(v) for k, v in row.items()}
        self.rows.append(row)
        if self._f:
            self._f.write(json.dumps(row) + "\n")      # one write per row: a crash never leaves half a row
            self._f.flush()

    def close(self) -> None:
        if self._f:
            self._f.close()
            self._f = None

    def to_pandas(self):
        import pandas as pd
        return pd.DataFrame(self.rows)

    def column(self, key: str) -> np.ndarray:
        return np.array([r.get(key, np.nan) for r in self.rows], dtype=float)

    @staticmethod
    def load(path) -> "RunLog":
        log = RunLog()
        with open(path) as f:
            log.rows = [json.loads(line) for line in f if line.strip()]
        return log


def _plain(v):
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu()
        return v.item() if v.dim() == 0 else v.tolist()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class Trainer:
    """Holds the env core, the policy, the optimizer and the RNGs of one run; ``step()`` does one update."""

    def __init__(self, cfg: TrainConfig, log_path: Optional[str] = None):
        cfg.validate()
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        torch.manual_seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)
        self.gen = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.B = cfg.prompts_per_step * cfg.group_size
        env_kwargs = dict(cfg.env_kwargs)
        if cfg.max_turns is not None:
            env_kwargs["max_turns"] = cfg.max_turns
        self.core = make_core(cfg.env, self.B, seed=cfg.seed, **env_kwargs)
        self.policy, self.codec = build_policy(cfg.policy, self.core, self.device, n_think=cfg.n_think,
                                               think_max=cfg.think_max, autocast=cfg.autocast)
        self.opt = torch.optim.AdamW(self.policy.parameters(), lr=cfg.lr, weight_decay=0.0)
        self.ref = None
        self.history = deque(maxlen=cfg.staleness + 1)         # policy weights of the last updates
        self.behaviour = copy.deepcopy(self.policy) if cfg.staleness else self.policy
        self.step_idx = 0
        self.log = RunLog(log_path, asdict(cfg))
        self.use_critic = cfg.critic if cfg.critic is not None else cfg.estimator in CRITIC_ESTIMATORS
        self.critic = self.critic_opt = None                   # built on first use, sized to the hidden states

    # ---- data --------------------------------------------------------------------------------
    def sample(self, policy=None, greedy: bool = False, tasks=None) -> Rollout:
        cfg = self.cfg
        if tasks is None:
            tasks = np.repeat(self.core.sample_tasks(self.rng, cfg.prompts_per_step), cfg.group_size, 0)
        group = self.step_idx * cfg.prompts_per_step + np.repeat(np.arange(cfg.prompts_per_step), cfg.group_size)
        if cfg.rollout != "independent" and not greedy:
            G = cfg.group_size
            return tree_rollout(policy or self.policy, self.core, tasks[::G], group[::G], codec=self.codec,
                                group_size=G, strategy=cfg.rollout, rng=self.rng, temperature=cfg.temperature,
                                context=cfg.context, context_k=cfg.context_k, constrain=cfg.constrain,
                                generator=self.gen, policy_version=max(0, self.step_idx - cfg.staleness),
                                **cfg.tree_kwargs)
        return rollout(policy or self.policy, self.core, tasks, group, codec=self.codec,
                       temperature=cfg.temperature, context=cfg.context, context_k=cfg.context_k,
                       constrain=cfg.constrain, greedy=greedy, generator=self.gen,
                       policy_version=max(0, self.step_idx - cfg.staleness), t2po_eta=0.0 if greedy else cfg.t2po_eta)

    def critic_features(self, ro) -> tuple[torch.Tensor, torch.Tensor]:
        """Detached policy hidden states (B, T, d) and, per turn, the state the turn was taken in
        (the hidden state of the token just before the turn's first policy token) (B, H, d)."""
        b = ro.batch
        with torch.no_grad():
            hid = self.policy.hidden(b.tokens, b.turn_id >= 0)                        # (B, T, d)
        pos = torch.arange(b.T, device=self.device).expand(b.B, b.T).float()
        first = b.token_to_turn(pos, "min").long().clamp(min=1) - 1                    # (B, H)
        turn_h = hid.gather(1, first[..., None].expand(-1, -1, hid.shape[-1]))          # (B, H, d)
        return hid, turn_h

    def fit_critic(self, ro) -> dict:
        """Values for the batch (before the update) and one critic step on Monte Carlo return targets."""
        b = ro.batch
        hid, turn_h = self.critic_features(ro)
        if self.critic is None:
            self.critic = TurnCritic(hid.shape[-1]).to(self.device)
            self.critic_opt = torch.optim.AdamW(self.critic.parameters(), lr=self.cfg.critic_lr)
        values = self.critic(turn_h)                                                    # (B, H)
        target = b.returns(self.cfg.critic_gamma)
        loss = value_loss(values, target, b.turn_mask)
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.critic_opt.step()
        with torch.no_grad():
            token_values = self.critic(hid)                                             # (B, T)
        ro.batch = b.replace(values=values.detach())
        return {"critic_loss": loss.item(), "token_values": token_values}

    def advantages(self, ro, token_values=None) -> torch.Tensor:
        """Token-level advantages (B, T) from the configured estimator (turn values reach observation tokens too)."""
        est, kw = ESTIMATORS[self.cfg.estimator], dict(self.cfg.estimator_kwargs)
        if token_values is not None and self.cfg.estimator in ("gae", "bilevel_gae"):
            kw.setdefault("token_values", token_values)
        if self.cfg.estimator == "remax" and "baseline_reward" not in kw:
            greedy = self.sample(greedy=True, tasks=ro.tasks)   # ReMax: one greedy episode per task
            kw["baseline_reward"] = greedy.batch.outcome()
        adv = est(ro.batch, **kw)
        return ro.batch.turn_to_token(adv) if est.level == "turn" else adv

    # ---- behaviour cloning ---------------------------------------------------------------------
    def behaviour_clone(self, steps: int) -> list[float]:
        """``steps`` updates of NLL on expert turns: shipped demos when they fit this env's settings,
        else the planner on freshly drawn tasks. Returns the losses."""
        cfg, losses = self.cfg, []
        demos = None
        if cfg.env_kwargs == DEMO_CONFIGS.get(cfg.env) or (cfg.env in DEMO_CONFIGS and not cfg.env_kwargs
                                                           and not DEMO_CONFIGS[cfg.env]):
            try:
                demos = load_demos(cfg.env)
            except FileNotFoundError:
                demos = None
        opt = torch.optim.AdamW(self.policy.parameters(), lr=cfg.bc_lr, weight_decay=0.0)
        for s in range(steps):
            if demos:
                pick = self.rng.choice(len(demos), self.B)
                tasks = np.array([demos[i]["task"] for i in pick])
                choose = replay_chooser([demos[i]["actions"] for i in pick])
            else:
                tasks, choose = self.core.sample_tasks(self.rng, self.B), expert_actions
            Expert = TextExpert if isinstance(self.codec, TextCodec) else ScriptedPolicy
            expert = Expert(self.core, self.codec, choose, self.device)
            ro = rollout(expert, self.core, tasks, np.arange(self.B), codec=self.codec, context=cfg.context,
                         context_k=cfg.context_k, constrain=cfg.constrain)
            logp, _ = recompute_logp(self.policy, ro, "matched")
            loss = bc_loss(logp, ro.batch.policy_mask)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    # ---- one RL step -----------------------------------------------------------------------------
    def step(self) -> dict:
        cfg = self.cfg
        t0 = time.perf_counter()
        self.policy.eval()
        if cfg.staleness:                                    # roll out with the weights of `staleness` updates ago
            self.history.append(copy.deepcopy(self.policy.state_dict()))
            self.behaviour.load_state_dict(self.history[0])
        ro = self.sample(self.behaviour)
        b = ro.batch
        t1 = time.perf_counter()
        crit = self.fit_critic(ro) if self.use_critic else {}
        b = ro.batch
        adv = self.advantages(ro, crit.pop("token_values", None))
        lmask = loss_mask(b.policy_mask, b.turn_id, cfg.mask_env_tokens)
        keep = torch.ones(b.B, dtype=torch.bool, device=self.device)
        counts = {}
        for name in cfg.filters:
            res = FILTERS[name](b, **cfg.filter_kwargs.get(name, {}))
            keep &= res.keep.to(self.device)
            counts.update({f"filter_{name}_{k}": v for k, v in res.counts.items()})
        lmask = lmask & keep[:, None]
        old_logp = b.old_logp
        ref_logp = None
        with torch.no_grad():
            if not cfg.mask_env_tokens:                      # env tokens were never sampled: score them once
                lp_env, _ = recompute_logp(self.behaviour, ro, "flat")
                old_logp = torch.where(b.policy_mask, b.old_logp, lp_env)
            if cfg.kl and cfg.kl_coef:
                if self.ref is None:
                    self.ref = copy.deepcopy(self.policy).eval()
                ref_logp, _ = recompute_logp(self.ref, ro, "matched")
        t2 = time.perf_counter()
        t_fwd = t_bwd = 0.0
        self.policy.train()
        for _ in range(cfg.ppo_epochs):
            ta = time.perf_counter()
            logp, ent = recompute_logp(self.policy, ro, cfg.recompute, env_tokens=not cfg.mask_env_tokens)
            loss, info = policy_loss(logp, old_logp, adv, lmask, b.turn_id, ratio=cfg.ratio, clip=cfg.clip,
                                     clip_kwargs=cfg.clip_kwargs, agg=cfg.agg, ref_logp=ref_logp,
                                     kl=cfg.kl if ref_logp is not None else None, kl_coef=cfg.kl_coef,
                                     H=b.H, adv_level="token")
            if cfg.entropy_coef:
                pm = b.policy_mask.float()
                loss = loss - cfg.entropy_coef * (ent * pm).sum() / pm.sum().clamp(min=1)
            tb = time.perf_counter()
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(),
                                                       cfg.grad_clip if cfg.grad_clip > 0 else float("inf"))
            if torch.isfinite(grad_norm):
                self.opt.step()
            t_fwd += tb - ta
            t_bwd += time.perf_counter() - tb
        self.step_idx += 1
        row = {"step": self.step_idx - 1}
        row.update(stability_report(b, info))
        R = b.outcome()
        row.update({
            "reward_mean": R.mean().item(), "success_rate": ro.success.float().mean().item(),
            "loss": loss.item(), "grad_norm": grad_norm.item(), "kept_frac": keep.float().mean().item(),
            "adv_abs_mean": adv[lmask].abs().mean().item() if lmask.any() else 0.0,
            "time_rollout": t1 - t0, "time_prep": t2 - t1, "time_recompute": t_fwd, "time_update": t_bwd,
            "batch_size": b.B, "tokens_generated": ro.stats.get("tokens_generated", 0), **counts, **crit,
        })
        self.log.append(row)
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
