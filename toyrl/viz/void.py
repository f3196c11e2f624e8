"""Void turns and the SimpleTIR filter (notebook 4): where the large gradients come from.

Dimension legend: B rollouts, T tokens, H turns, S seeds, N steps.

A void turn gives the env nothing it can act on (here: an end-of-turn, a stray observation token
or a second action instead of exactly one action token). With ``constrain=False`` the toy policy
may write any token, so void turns are frequent, and their tokens are unlikely ones: the
gradient of log p for a token of probability p has norm about (1 - p) at the logits, so rare
tokens carry the largest score gradients. SimpleTIR (arXiv 2509.02479) masks the loss of every
trajectory with a void turn (``filters=["void_turn"]``) while it still counts in the group
baseline.

    grads = void_gradients(cfg)            # per-trajectory score-gradient norms, void vs clean
    sweep = load_sweep(RUNS_DIR / "void" / "filter.json")   # or precompute()

Precompute: ``python -m toyrl.viz.void`` (writes data/runs/void/filter.json).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from ..diagnostics import grad_norm_per_turn
from ..objectives import loss_mask, policy_loss
from ..rollout.flatten import recompute_logp
from ..train import TrainConfig, Trainer
from .plots import label, legend
from .prototype import arm_curves, draw_curves, sweep_precompute
from .style import figsize, subplots

__all__ = ["SETTING", "setting_name", "base_config", "void_arms", "void_gradients", "void_rate_by_turn",
           "plot_void_gradients", "plot_void_panel", "toggled_arms", "void_panel", "precompute", "KEYS"]

KEYS = ("reward_mean", "success_rate", "void_turn_rate", "void_traj_rate", "grad_norm", "kept_frac")
SETTING = "MockSearch 1-hop, 4 turns, free sampling, P=4 x G=8, 60 BC steps"
"""the setting of this notebook's batches and sweep (``base_config``), named in its figure titles"""


def base_config(*, constrain: bool = False, void_penalty: float = 0.0, filters=(), steps: int = 30,
                bc_steps: int = 60, seed: int = 0) -> TrainConfig:
    """MockSearch (one-hop questions, no noise, 4 turns), GRPO after ``bc_steps`` of behaviour cloning.

    ``constrain=False`` lets the policy write any token, so void turns stay common (after 60 BC steps
    about half the trajectories hold one, more in later turns) and rare: the regime SimpleTIR
    describes, a mostly well-formatted policy that sometimes drifts off format. A well-formed turn
    is two tokens here (END, then the action), so BC needs more steps than a one-token format."""
    return TrainConfig(env="mock_search", env_kwargs={"noise_sentences": 0, "max_turns": 4, "hops": (1,),
                                                      "void_penalty": float(void_penalty)},
                       constrain=constrain, filters=list(filters), prompts_per_step=4, group_size=8,
                       steps=steps, bc_steps=bc_steps, seed=seed, progress=False)


def setting_name(cfg: TrainConfig) -> str:
    """The setting a figure of ``cfg``'s batches names: hops, turns, sampling, P x G, BC steps, seed.

    Example: setting_name(base_config(seed=1)) -> SETTING + ", seed 1"."""
    kw = cfg.env_kwargs
    return (f"MockSearch {'/'.join(map(str, kw['hops']))}-hop, {kw['max_turns']} turns, "
            f"{'constrained' if cfg.constrain else 'free'} sampling, P={cfg.prompts_per_step} x G={cfg.group_size}, "
            f"{cfg.bc_steps} BC steps, seed {cfg.seed}")


def void_arms(steps: int = 30, void_penalty: float = 0.1) -> dict:
    """The three arms of the sweep: GRPO, GRPO with the void_turn filter, GRPO with a void-turn penalty."""
    return {
        "GRPO": base_config(steps=steps),
        "GRPO + void filter": base_config(filters=["void_turn"], steps=steps),
        f"GRPO + penalty {void_penalty}": base_config(void_penalty=void_penalty, steps=steps),
    }


def void_gradients(cfg: TrainConfig, train_steps: int = 0) -> dict:
    """One batch of ``cfg`` (after ``train_steps`` updates): gradient norms split by void / clean.

    Returns numpy arrays: ``void`` (B,) trajectory has a void turn; ``score_norm`` (B,)
    || grad_theta mean_t log pi(token_t) || over the trajectory's policy tokens (no advantage: how
    hard its tokens pull on the weights); ``void_token_logp`` / ``clean_token_logp`` the log-probs of
    the policy tokens of void / clean turns; ``grad_turn`` (H,) the exact gradient norm of each turn
    index's share of the GRPO loss; ``grad_void_share`` / ``grad_clean_share`` the gradient norm of the
    void / clean trajectories' share of that loss; ``adv_abs`` (B,) |A| per row; ``void_rate_turn`` (H,) void-turn rate per turn index;
    ``setting`` the batch's ``setting_name`` (and the GRPO steps after BC), for the figure's title.
    """
    tr = Trainer(replace(cfg, steps=0))
    if cfg.bc_steps:
        tr.behaviour_clone(cfg.bc_steps)
    for _ in range(train_steps):
        tr.step()
    ro = tr.sample()
    b = ro.batch
    params = [p for p in tr.policy.parameters() if p.requires_grad]
    logp, _ = recompute_logp(tr.policy, ro, "matched")                         # (B, T)
    pm = b.policy_mask
    norms = []
    for i in range(b.B):
        m = pm[i]
        g = torch.autograd.grad(logp[i][m].mean(), params, retain_graph=True, allow_unused=True)
        norms.append(float(torch.sqrt(sum((x.double() ** 2).sum() for x in g if x is not None))))
    adv = tr.advantages(ro)
    lmask = loss_mask(pm, b.turn_id, True)
    _, info = policy_loss(logp, b.old_logp, adv, lmask, b.turn_id, H=b.H, adv_level="token")
    grad_turn = grad_norm_per_turn(info, b.turn_id, params, H=b.H)
    void_row = (b.void_turn & b.turn_mask).any(1)                               # (B,)
    share = {}
    for name, rows in (("void", void_row), ("clean", ~void_row)):              # the loss is linear in rows
        part = (info["token_loss"] * info["agg_weight"] * rows[:, None]).sum()
        g = torch.autograd.grad(part, params, retain_graph=True, allow_unused=True)
        share[name] = float(torch.sqrt(sum((x.double() ** 2).sum() for x in g if x is not None)))
    void_tok = b.turn_to_token(b.void_turn.float()).bool() & pm                 # (B, T)
    return {"void": void_row.numpy(), "score_norm": np.array(norms), "grad_void_share": share["void"],
            "grad_clean_share": share["clean"], "adv_abs": adv.abs().amax(1).numpy(),
            "void_token_logp": b.old_logp[void_tok].numpy(), "clean_token_logp": b.old_logp[pm & ~void_tok].numpy(),
            "grad_turn": grad_turn.detach().numpy(), "void_rate_turn": void_rate_by_turn(b.void_turn, b.turn_mask),
            "turns": b.turn_mask.sum(0).numpy(),
            "setting": setting_name(cfg) + (f", {train_steps} GRPO steps" if train_steps else "")}


def void_rate_by_turn(void: torch.Tensor, turn_mask: torch.Tensor) -> np.ndarray:
    """Void-turn rate per turn index (H,): void & valid over valid. Example: void [[F, T], [T, F]] -> [0.5, 0.5]."""
    v = (void.bool() & turn_mask.bool()).sum(0).double()
    return (v / turn_mask.sum(0).clamp(min=1).double()).numpy()


def plot_void_gradients(g: dict, ax=None):
    """Histogram of per-trajectory score-gradient norms, void vs clean trajectories (left); per turn index,
    the gradient norm of that turn's loss share and the void-turn rate (right); titled with ``g["setting"]``.
    Legends sit below the axes (outside the data); turn indices are integer ticks."""
    from matplotlib.ticker import MaxNLocator
    axes = ax if ax is not None else subplots(1, 2, size=figsize(10, 4.6), layout="constrained")[1]
    bins = np.linspace(0, max(g["score_norm"].max(), 1e-6), 25)
    for flag, name, color in ((True, "with a void turn", "#e63946"), (False, "clean", "#457b9d")):
        x = g["score_norm"][g["void"] == flag]
        if len(x):
            axes[0].hist(x, bins, alpha=0.6, color=color, label=f"{name} (n={len(x)}, mean {x.mean():.2f})")
    axes[0].set_xlabel("|| grad mean_t log pi ||")
    axes[0].set_ylabel("trajectories")
    axes[0].legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), borderaxespad=0.0)
    axes[0].set_title("score-gradient norm per trajectory")
    H = len(g["grad_turn"])
    axes[1].bar(np.arange(H), g["grad_turn"], color="#457b9d", label="grad norm of turn k's loss share")
    tw = axes[1].twinx()
    tw.plot(np.arange(H), g["void_rate_turn"], "o-", color="#e63946", label="void-turn rate (right)")
    tw.set_ylim(0, 1)
    tw.set_ylabel("void-turn rate")
    axes[1].set_xlabel("turn index k")
    axes[1].set_ylabel("gradient norm")
    axes[1].set_title("per turn index")
    axes[1].xaxis.set_major_locator(MaxNLocator(integer=True))
    legend(axes[1], tw, loc="upper center", bbox_to_anchor=(0.5, -0.2), borderaxespad=0.0)
    if g.get("setting"):
        axes[0].figure.suptitle(f"{g['setting']}: one batch")
    return axes


def plot_void_panel(sweep: dict, arms=None, key: str = "void_turn_rate", smooth_w: int = 5):
    """Widget panel: ``key`` (left) and the grad norm (right) over steps for the chosen arms (mean +- s.e.
    over seeds; the curves of each side are ``arm_curves(sweep, k, arms, smooth_w)``), under a title naming
    ``SETTING`` and the steps. Each arm keeps its colour whatever is ticked (``style.arm_color``); one legend,
    right of the right panel, outside the data."""
    fig, axes = subplots(1, 2, size=figsize(10, 4), layout="constrained")
    for ax, k in zip(axes, (key, "grad_norm")):
        curves = arm_curves(sweep, k, arms, smooth_w)
        draw_curves(ax, curves, label(k) + (f" ({smooth_w}-step mean)" if smooth_w > 1 else ""), "RL step", label(k))
    axes[0].get_legend().remove()                                  # the same arms: one legend, on the right
    n = max((len(c["x"]) for c in curves.values()), default=0)
    fig.suptitle(f"{SETTING}\nGRPO arms, {n} RL steps")
    return fig


def toggled_arms(names, flags) -> list:
    """The arms whose checkbox is on, in order; the first arm when every box is off.

    Example: toggled_arms(["a", "b", "c"], (True, False, True)) -> ["a", "c"]; (False,) * 3 -> ["a"].
    """
    names = list(names)
    return [a for a, on in zip(names, flags) if on] or names[:1]


def void_panel(sweep: dict, metric: str = "void_turn_rate", smooth: int = 5, grpo: bool = True,
               filtered: bool = True, penalty: bool = True):
    """Notebook 4's widget: ``plot_void_panel`` of the arms ticked (GRPO, + void filter, + penalty, in
    ``void_arms`` order). Bind the sweep: ``interactive(bind(void_panel, sweep), metric=[...], smooth=(1, 10))``."""
    return plot_void_panel(sweep, toggled_arms(sweep, (grpo, filtered, penalty)), key=metric, smooth_w=smooth)


precompute = sweep_precompute("void/filter.json", void_arms, KEYS, 30, "toyrl.viz.void")


if __name__ == "__main__":
    print(precompute())
