"""Importance ratios in a multi-turn batch: env-token masking, ratio level, clipping, staleness.

Dimension legend: B rollouts, T tokens, H turns.

One batch is rolled out by a behaviour policy pi_0. The trainer's policy pi_k is pi_0 after
``staleness`` plain policy-gradient steps on that same batch (what k PPO epochs, or rollouts k
updates old, amount to), so the importance ratio r_t = pi_k(y_t | .) / pi_0(y_t | .) moves away from 1:

    token     r_t                                       (PPO, CISPO, SAPO)
    turn      exp(mean_{t in turn} log r_t)             (SORL / Turn-PPO, arXiv 2511.20718)
    sequence  exp(mean_{t in row} log r_t)              (GSPO, arXiv 2507.18071)

With ``mask_env=False`` the observation tokens also enter the loss (and the updates): tokens the
policy never wrote, scored once under pi_0 (Search-R1, arXiv 2503.09516, masks them out).

    s = ratio_stats(level="token", clip="ppo", staleness=2, mask_env=False)
    s["grad_norm"], s["env_grad_share"], s["ratio_max_turn"]
    fig = ratio_panel(level="turn", clip="sapo", staleness=3)
"""
from __future__ import annotations

import copy
from functools import lru_cache
from typing import Sequence

import numpy as np
import torch
from matplotlib.ticker import MaxNLocator, NullFormatter

from ..credit import ESTIMATORS
from ..diagnostics import grad_norm_per_turn
from ..objectives import CLIP_SCHEMES, loss_mask, policy_loss
from ..envs import make_core
from ..train.build import build_policy
from ..policies.scripted import ScriptedPolicy
from ..rollout.flatten import recompute_logp, to_rollout
from ..rollout.play import Episode, play
from .credit_batch import noisy_expert
from .plots import legend, new_figure
from .style import arm_color

__all__ = ["RATIO_ENVS", "EPS_KEYS", "scaled_clip_kwargs", "stale_setup", "ratio_stats", "compute_ratio_stats",
           "compare_schemes",
           "compare_masking", "setting_name", "resolve_level", "ratio_panel", "plot_schemes", "ledger_sweep",
           "turn_ratio_effects"]

#: small settings (MockSearch: every passage word is an observation token, as in a real tool output)
RATIO_ENVS = {"mock_search": {"noise_sentences": 3, "max_turns": 3, "token_view": "word"},
              "gridworld": {"map_name": "4x4", "max_turns": 8}}

#: the clip-width hyperparameters of each scheme that ``eps_scale`` multiplies (SAPO: the gate width 1/tau)
EPS_KEYS = {"ppo": ("eps_low", "eps_high"), "clip_higher": ("eps_low", "eps_high"), "turn_ppo": ("eps_low", "eps_high"),
            "gspo": ("eps_low", "eps_high"), "dual_clip": ("eps_low", "eps_high"), "cispo": ("eps_high",),
            "sorl": ("eps",), "gmpo": ("eps_low", "eps_high"), "loop": ("eps",), "tis": ("eps_low", "eps_high"),
            "sapo": ("tau_pos", "tau_neg")}


def scaled_clip_kwargs(clip: str, eps_scale: float = 1.0) -> dict:
    """The scheme's default clip widths times ``eps_scale`` (SAPO: its temperatures divided by it).

    Example: scaled_clip_kwargs("ppo", 2.0) -> {"eps_low": 0.4, "eps_high": 0.4}.
    """
    hp = CLIP_SCHEMES[clip].hyperparameters()
    out = {}
    for k in EPS_KEYS.get(clip, ()):
        if k in hp and hp[k] is not None:
            out[k] = hp[k] / eps_scale if clip == "sapo" else hp[k] * eps_scale
    return out


class _Thinking:
    """Wraps a ScriptedPolicy: before each scripted turn (END, action), 0..think_max random reasoning tokens, so turns
    hold several policy tokens (and token, turn and sequence ratios differ)."""

    def __init__(self, scripted, codec, seed: int):
        self.s, self.codec, self.rng = scripted, codec, np.random.default_rng(seed)
        self.vocab_size = scripted.vocab_size

    @property
    def device(self):
        return self.s.device

    def generate(self, context, context_mask, max_new, temperature=1.0, **kw):
        kw.pop("constraint", None)                                                   # the turn is rewritten below
        out = self.s.generate(context, context_mask, max_new, temperature, **kw)
        n, c = out.tokens.shape[0], self.codec
        k = torch.as_tensor(self.rng.integers(0, c.think_max + 1, n))[:, None]       # reasoning tokens per row
        think = torch.as_tensor(self.rng.integers(c.think0, c.act0, (n, max_new)))
        pos = torch.arange(max_new)[None]                                            # (1, M)
        mask = pos < k + out.mask.sum(1, keepdim=True)                               # reasoning, then the scripted turn
        tokens = torch.where(pos < k, think, out.tokens.gather(1, (pos - k).clamp(min=0)))
        out.tokens, out.mask = torch.where(mask, tokens, torch.full_like(tokens, c.PAD)), mask
        out.logp, out.entropy = torch.zeros(n, max_new), torch.zeros(n, max_new)
        return out


@lru_cache(maxsize=32)
def stale_setup(env: str = "mock_search", staleness: int = 2, mask_env: bool = True, *, lr: float = 3e-2,
                prompts: int = 4, group: int = 4, eps: float = 0.4, seed: int = 0):
    """(ro, adv_BT, lmask, old_logp, pi_k) of one stale batch. Cached: treat the result as read-only.

    The batch is played by a noisy planner (``credit.noisy_expert``: random action w.p. ``eps``) that
    writes 0-2 random thinking tokens before each action, so groups hold successes and failures and
    turns hold several tokens; pi_0 is an untrained toy policy and ``old_logp`` are pi_0's
    log-probs of every token (the batch is off-policy for pi_0 from the start, like replayed data).
    adv: GRPO outcome advantages on every token of a turn (observation tokens included); lmask: the
    loss tokens; pi_k: pi_0 after ``staleness`` AdamW steps (``lr``) of the plain policy gradient
    -sum(A logp) over lmask on this batch.
    """
    core = make_core(env, prompts * group, seed=seed, **RATIO_ENVS.get(env, {}))
    pi0, codec = build_policy("tiny", core, "cpu", seed=seed, think_max=2)
    rng = np.random.default_rng(seed)
    tasks = np.repeat(core.sample_tasks(rng, prompts), group, 0)
    core.reset(tasks)
    episodes = [Episode(codec.prompt(core, i), tasks[i], group=i // group) for i in range(len(tasks))]
    play(_Thinking(ScriptedPolicy(core, codec, noisy_expert(eps, 0.0, seed)), codec, seed), core, episodes, codec)
    ro = to_rollout(episodes, codec, "cpu")
    with torch.no_grad():
        old, _ = recompute_logp(pi0, ro, "flat")                                 # (B, T) pi_0 on every token
    b = ro.batch = ro.batch.replace(old_logp=old)
    adv = b.turn_to_token(ESTIMATORS["grpo"](b))                                 # (B, T)
    lmask = loss_mask(b.policy_mask, b.turn_id, mask_env)
    pi = copy.deepcopy(pi0)
    opt = torch.optim.AdamW(pi.parameters(), lr=lr, weight_decay=0.0)
    for _ in range(staleness):
        logp, _ = recompute_logp(pi, ro, "matched")
        m = lmask.float()
        loss = -(adv * logp * m).sum() / m.sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return ro, adv, lmask, old, pi


def ratio_stats(env: str = "mock_search", level: str = "token", clip: str = "ppo", eps_scale: float = 1.0,
                staleness: int = 2, mask_env: bool = True, *, seed: int = 0, per_turn_grad: bool = True) -> dict:
    """``compute_ratio_stats`` with the same arguments, cached: a widget that returns to a setting (or a
    notebook cell that asks again) reads it back instead of recomputing the losses and the per-turn
    gradients. Returns a fresh copy (its arrays copied), so a caller may change it."""
    out = _cached_ratio_stats(env, level, clip, float(eps_scale), int(staleness), bool(mask_env), int(seed),
                              bool(per_turn_grad))
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in out.items()}


@lru_cache(maxsize=512)
def _cached_ratio_stats(env, level, clip, eps_scale, staleness, mask_env, seed, per_turn_grad) -> dict:
    return compute_ratio_stats(env, level, clip, eps_scale, staleness, mask_env, seed=seed,
                               per_turn_grad=per_turn_grad)


def compute_ratio_stats(env: str = "mock_search", level: str = "token", clip: str = "ppo", eps_scale: float = 1.0,
                        staleness: int = 2, mask_env: bool = True, *, seed: int = 0,
                        per_turn_grad: bool = True) -> dict:
    """Ratios, clipping and gradients of one stale batch under a ratio level and clip scheme (uncached; the
    stale batch and pi_k come from the cached ``stale_setup``, which no slider but staleness, env, mask and
    seed changes).

    Returns numpy values: ratio (B, T) level ratio, mask (B, T) loss tokens, policy (B, T) policy
    tokens, logp_old (B, T); scalars grad_norm, env_grad_share (share of ||dL/dlogp||^2 on env
    tokens), grad_token_frac (loss tokens with a non-zero dL/dlogp), clip_frac, ratio_max, ratio_min,
    max_token_grad; per turn index (H,): ratio_max_turn, ratio_min_turn, clip_frac_turn, grad_norm_turn.
    """
    ro, adv, lmask, old, pi = stale_setup(env, int(staleness), bool(mask_env), seed=seed)
    b = ro.batch
    pi.zero_grad(set_to_none=True)
    logp, _ = recompute_logp(pi, ro, "matched")
    loss, info = policy_loss(logp, old, adv, lmask, b.turn_id, ratio=level, clip=clip,
                             clip_kwargs=scaled_clip_kwargs(clip, eps_scale), H=b.H, adv_level="token")
    g_tok = torch.autograd.grad(loss, logp, retain_graph=True)[0]               # (B, T) dL/dlogp
    gn_turn = (grad_norm_per_turn(info, b.turn_id, pi.parameters(), H=b.H).numpy() if per_turn_grad
               else np.full(b.H, np.nan))
    loss.backward()
    gn = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in pi.parameters() if p.grad is not None)))
    g2 = (g_tok ** 2) * lmask
    env = lmask & ~b.policy_mask
    nz = (g_tok.abs() > 1e-12) & lmask
    return {
        "ratio": info["ratio"].numpy(), "mask": lmask.numpy(), "policy": b.policy_mask.numpy(),
        "logp_old": old.numpy(), "turn_id": b.turn_id.numpy(), "loss": float(loss.detach()),
        "grad_norm": gn, "env_grad_share": float(g2[env].sum() / g2.sum().clamp(min=1e-30)),
        "grad_token_frac": float(nz.sum() / lmask.sum().clamp(min=1)), "max_token_grad": float(g_tok.abs().max()),
        "clip_frac": float(info["clip_frac"]), "ratio_max": float(info["ratio_max"]), "ratio_min": float(info["ratio_min"]),
        "ratio_max_turn": info["ratio_max_turn"].numpy(), "ratio_min_turn": info["ratio_min_turn"].numpy(),
        "clip_frac_turn": info["clip_frac_turn"].numpy(), "grad_norm_turn": gn_turn,
        "n_policy_tokens": int((lmask & b.policy_mask).sum()), "n_env_tokens": int(env.sum()),
    }


def compare_schemes(schemes: Sequence[str] = ("ppo", "gspo", "cispo", "sapo"), staleness: int = 2,
                    env: str = "mock_search", eps_scale: float = 1.0, seed: int = 0) -> dict:
    """{scheme: ratio_stats(...)} at each scheme's own ratio level, same stale batch."""
    return {s: ratio_stats(env, CLIP_SCHEMES[s].level, s, eps_scale, staleness, True, seed=seed, per_turn_grad=False)
            for s in schemes}


def compare_masking(staleness: int = 2, env: str = "mock_search", seed: int = 0) -> dict:
    """{"masked": stats, "unmasked": stats} of token-level PPO with env tokens out of / in the loss."""
    return {name: ratio_stats(env, "token", "ppo", 1.0, staleness, m, seed=seed, per_turn_grad=False)
            for name, m in (("masked", True), ("unmasked", False))}


def setting_name(env: str = "mock_search", staleness: int = 2, seed: int = 0) -> str:
    """The setting a ratio figure names: env (with its ``RATIO_ENVS`` size), staleness, seed.

    Example: setting_name("gridworld", 3) -> "GridWorld 4x4, 4 prompts x 4 rollouts, staleness 3, seed 0".
    """
    name = {"mock_search": "MockSearch", "gridworld": "GridWorld 4x4"}.get(env, env)
    return f"{name}, 4 prompts x 4 rollouts, staleness {staleness}, seed {seed}"


def ledger_sweep(name: str, keys: Sequence[str], ledger_dir=None) -> dict:
    """A ledger claim's stored runs as a sweep, {arm: {key: (S, N) list}} (``prototype.arms_figure``'s input),
    read from ``<ledger_dir>/<name>.series.json.gz`` (default: the shipped ledger, seeds 0-9), seeds in order."""
    from ..lab.claims.report import load_series
    from .echo import LEDGER_DIR
    series = load_series((ledger_dir or LEDGER_DIR) / f"{name}.series.json.gz")
    return {arm: {k: [list(map(float, runs[s][k])) for s in sorted(runs)] for k in keys}
            for arm, runs in series.items()}


def turn_ratio_effects(ledger_dir=None) -> dict:
    """The ledger's ``turn_ratio`` runs recomputed from their stored gradient norms: {arm: (S,) array} of
    mean log10(g_token / g_turn) over the batches where both are non-zero (NaN: no such batch), per seed.
    Example: gradients token [1.0, 0.0], turn [0.1, 0.0] -> 1.0 (the zero batch is left out)."""
    from ..lab.claims.report import load_series
    from .echo import LEDGER_DIR
    series = load_series((ledger_dir or LEDGER_DIR) / "turn_ratio.series.json.gz")
    out = {}
    for arm, runs in series.items():
        eff = []
        for s in sorted(runs):
            gt, gu = np.asarray(runs[s]["grad_token"], float), np.asarray(runs[s]["grad_turn"], float)
            ok = (gt > 0) & (gu > 0)
            eff.append(float(np.mean(np.log10(gt[ok] / gu[ok]))) if ok.any() else float("nan"))
        out[arm] = np.asarray(eff)
    return out


def resolve_level(level: str, clip: str) -> str:
    """The ratio level a panel uses: ``level``, or the clip scheme's own level for ``"auto"`` (GSPO is a
    sequence-level scheme: a token-level ratio under GSPO's band is not GSPO).

    Example: resolve_level("auto", "gspo") -> "sequence"; resolve_level("token", "gspo") -> "token".
    """
    if clip not in CLIP_SCHEMES:
        raise ValueError(f"clip must be one of {sorted(CLIP_SCHEMES)}, got {clip!r}")
    if level == "auto":
        return CLIP_SCHEMES[clip].level
    if level not in ("token", "turn", "sequence"):
        raise ValueError(f"level must be 'auto', 'token', 'turn' or 'sequence', got {level!r}")
    return level


def ratio_panel(level: str = "auto", clip: str = "ppo", eps_scale: float = 1.0, staleness: int = 2,
                mask_env: bool = True, env: str = "mock_search", seed: int = 0):
    """The widget figure: log-ratio histogram (policy vs env tokens), ratio extremes and clip fraction
    per turn index, gradient norm per turn index; the title names the setting and the scheme.
    ``level="auto"``: the scheme's own ratio level (``resolve_level``)."""
    level = resolve_level(level, clip)
    s = ratio_stats(env, level, clip, eps_scale, staleness, mask_env, seed=seed)
    fig, axes = new_figure(1, 3, width=3.3, height=4.2, layout="constrained")
    lr = np.log(np.clip(s["ratio"], 1e-30, None))
    pol, envm = s["mask"] & s["policy"], s["mask"] & ~s["policy"]
    ax = axes[0, 0]
    bins = np.linspace(min(lr[s["mask"]].min(), -0.05), max(lr[s["mask"]].max(), 0.05), 40)
    ax.hist(lr[pol], bins=bins, color="#e76f51", alpha=0.8, label=f"policy tokens ({pol.sum()})")
    if envm.any():
        ax.hist(lr[envm], bins=bins, color="#2a9d8f", alpha=0.6, label=f"env tokens ({envm.sum()})")
    ax.set_yscale("log")
    ax.set_xlabel(f"log {level} ratio")
    ax.set_ylabel("loss tokens (log scale)")
    ax.set_title(f"ratio in [{s['ratio_min']:.2f}, {s['ratio_max']:.2f}]")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), borderaxespad=0.0)
    H = len(s["ratio_max_turn"])
    ax = axes[0, 1]
    ax.semilogy(range(H), s["ratio_max_turn"], "o-", color="#c0392b", label="max ratio")
    ax.semilogy(range(H), np.clip(s["ratio_min_turn"], 1e-6, None), "o-", color="#2c3e50", label="min ratio")
    ax2 = ax.twinx()
    ax2.bar(range(H), s["clip_frac_turn"], alpha=0.25, color="#8e44ad", label="clip fraction (right)")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("clip fraction")
    ax.set_zorder(ax2.get_zorder() + 1)                                        # lines over the bars
    ax.patch.set_visible(False)
    ax.set_xlabel("turn index")
    ax.set_ylabel(f"{level} ratio (log scale)")
    ax.set_title(f"{clip} x{eps_scale:g}: clipped {s['clip_frac']:.2f}")
    legend(ax, ax2, loc="upper center", bbox_to_anchor=(0.5, -0.22), borderaxespad=0.0)
    ax = axes[0, 2]
    ax.bar(range(H), s["grad_norm_turn"], color="#457b9d")
    ax.set_xlabel("turn index")
    ax.set_ylabel("grad norm of the turn's loss")
    ax.set_title(f"grad norm (total {s['grad_norm']:.3f})")
    for a in (*axes.flat, ax2):
        a.yaxis.set_minor_formatter(NullFormatter())                           # log axes: decades only
    for a in axes[0, 1:]:
        a.xaxis.set_major_locator(MaxNLocator(integer=True))                   # turns are whole numbers
    fig.suptitle(f"{setting_name(env, staleness, seed)}\n{level} ratio, {clip} clip, env tokens "
                 f"{'masked' if mask_env else 'in the loss'}")
    return fig


def plot_schemes(stats: dict, setting: str = ""):
    """Horizontal bars per clip scheme (so long names never collide): share of loss tokens that still pass a
    gradient, and the grad norm; ``setting`` (e.g. ``setting_name(env, staleness)``) goes in the title."""
    names = list(stats)
    fig, axes = new_figure(1, 2, width=4.4, height=0.4 * len(names) + 1.8, layout="constrained")
    y = np.arange(len(names))
    for ax, key, xlabel in ((axes[0, 0], "grad_token_frac", "share of loss tokens"),
                            (axes[0, 1], "grad_norm", "gradient norm")):
        ax.barh(y, [stats[n][key] for n in names], color=[arm_color(n) for n in names])
        ax.set_yticks(y, names)
        ax.invert_yaxis()                                                      # first scheme on top
        ax.set_xlabel(xlabel)
        ax.set_ylabel("clip scheme")
    axes[0, 0].set_title("loss tokens with a gradient")
    axes[0, 0].set_xlim(0, 1.05)
    axes[0, 1].set_title("gradient norm")
    fig.suptitle(f"clip schemes on one stale batch{chr(10) + setting if setting else ''}")
    return fig
