"""Critics (notebook 6): turn-level value models, ArCHer's double critic and a privileged critic.

Dimension legend: N episodes, H turns, D features, S seeds, N steps of a run.

Three experiments on GridWorld (4x4, random maps unless said otherwise):

- ``collect_grid``: episodes of a behaviour policy (the BFS expert with probability ``p_expert``,
  else a uniform move) with per-turn features the policy can see (position and hole map, one-hot),
  a privileged feature it cannot (the BFS distance to the goal, what a reference solution gives;
  SWEET-RL, arXiv 2503.15478), actions, rewards and discounted returns;
- ``fit_value``: a ``TurnCritic`` regressed on Monte Carlo returns with or without the privileged
  feature -> held-out value error per fitting step (how much a critic knows per sample);
- ``fit_archer``: ArCHer's double Q / V trained by TD (arXiv 2402.19446) -> advantages
  A = min Q - min V, checked against which moves were the expert's;
- the trainer-level comparison GRPO vs Turn-PPO (``estimator="turn_gae"``, critic fitted by the
  trainer, arXiv 2512.17008) across seeds, precomputed by ``python -m toyrl.viz.critics``
  (data/runs/critics/curves.json).
"""
from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import torch

from ..batch import discounted_returns
from ..credit.critics import DoubleCritic, TurnCritic, archer, archer_losses, soft_update, value_loss
from ..envs.experts import expert_actions, process_scores
from ..envs import make_core
from ..train import TrainConfig
from .plots import label
from .prototype import arm_curves, draw_curves, sweep_precompute
from .style import arm_color, figsize, font_size, subplots

__all__ = ["collect_grid", "features", "fit_value", "fit_archer", "plot_value_fit", "plot_td_losses", "value_fits",
           "value_panel", "data_setting", "critic_arms", "plot_critic_panel", "precompute", "COLORS", "KEYS", "SETTING", "CURVES_SETTING"]

KEYS = ("reward_mean", "success_rate", "critic_loss", "grad_norm")
COLORS = {"GRPO": arm_color("grpo"), "Turn-PPO (turn_gae)": arm_color("turn_gae"), "observable": "#1f77b4",
          "privileged": "#9467bd", "Q loss": "#d62728", "V loss": "#2ca02c"}
"""curve -> its colour in every figure of the lesson"""
SETTING = "GridWorld 4x4, random maps"
"""the setting of ``collect_grid``'s episodes, named in the critic-fitting figures' titles"""
CURVES_SETTING = "GridWorld 4x4 (fixed map), P=4 x G=8"
"""the setting of the trainer sweep (``critic_arms``), named in its learning-curve titles"""


def collect_grid(n: int = 256, *, seed: int = 0, p_expert: float = 0.5, max_turns: int = 10,
                 gamma: float = 0.9, size: int = 4) -> dict:
    """N episodes of the expert-or-random behaviour on random maps -> dict of numpy / torch arrays.

    ``obs`` (N, H, 2 n^2) one-hot position + hole map; ``priv`` (N, H, 1) BFS distance / n^2 (1.5 in a
    dead end); ``action`` / ``action_pi`` (N, H) the move taken and a fresh behaviour sample at the
    same state (ArCHer's V target); ``expert`` (N, H) the move was the expert's; ``reward``, ``mask``,
    ``returns`` (N, H) discounted with ``gamma``.
    """
    rng = np.random.default_rng(seed)
    core = make_core("gridworld", n, seed=seed, size=size, max_turns=max_turns)
    core.reset(core.sample_tasks(rng, n))
    C = size * size
    obs = np.zeros((n, max_turns, 2 * C), np.float32)                          # (N, H, 2C)
    priv = np.zeros((n, max_turns, 1), np.float32)
    action = np.zeros((n, max_turns), np.int64)
    action_pi = np.zeros((n, max_turns), np.int64)
    expert = np.zeros((n, max_turns), bool)
    reward = np.zeros((n, max_turns), np.float32)
    mask = np.zeros((n, max_turns), bool)
    behave = lambda e: np.where(rng.random(n) < p_expert, e, rng.integers(0, 4, n))   # noqa: E731
    for k in range(max_turns):
        live = ~core.done
        if not live.any():
            break
        st = core.state
        obs[np.arange(n), k, st["pos"]] = 1.0
        obs[:, k, C:] = (st["tiles"] == 1)                                      # holes
        d = -process_scores(core)
        priv[:, k, 0] = np.where(d >= 100, 1.5, d / C)
        e = expert_actions(core)
        a, a_pi = behave(e), behave(e)
        action[:, k], action_pi[:, k], expert[:, k], mask[:, k] = a, a_pi, a == e, live
        _, r, *_ = core.step(np.where(live, a, 0))
        reward[:, k] = np.where(live, r, 0.0)
    t = lambda x: torch.as_tensor(x)                                            # noqa: E731
    ret = discounted_returns(t(reward), t(mask), gamma)
    return {"obs": t(obs), "priv": t(priv), "action": t(action), "action_pi": t(action_pi), "expert": t(expert),
            "reward": t(reward), "mask": t(mask), "returns": ret, "gamma": gamma}


def features(data: dict, privileged: bool) -> torch.Tensor:
    """Critic input (N, H, D): the observable one-hots, plus the privileged distance if asked."""
    return torch.cat([data["obs"], data["priv"]], -1) if privileged else data["obs"]


def fit_value(train: dict, test: dict, *, privileged: bool, steps: int = 200, lr: float = 1e-2,
              seed: int = 0, every: int = 10, progress: bool = False) -> dict:
    """Fit V(s_k) on Monte Carlo returns (full-batch AdamW, ``value_loss``) -> held-out MSE curve.

    Returns ``step`` and ``test_mse`` arrays (every ``every`` steps) and the final ``train_mse``;
    ``progress``: a ``tqdm.auto`` bar over the fitting steps.
    """
    from tqdm.auto import tqdm
    bar = tqdm(total=steps, desc=f"fitting the {'privileged' if privileged else 'observable'} critic",
               disable=not progress)
    torch.manual_seed(seed)
    x, xt = features(train, privileged), features(test, privileged)
    critic = TurnCritic(x.shape[-1])
    opt = torch.optim.AdamW(critic.parameters(), lr=lr)
    curve, at = [], []
    for s in range(steps + 1):
        if s % every == 0 or s == steps:
            with torch.no_grad():
                curve.append(2 * value_loss(critic(xt), test["returns"], test["mask"]).item())
                at.append(s)
        if s == steps:
            break
        loss = value_loss(critic(x), train["returns"], train["mask"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        bar.update(1)
    bar.close()
    with torch.no_grad():
        tr = 2 * value_loss(critic(x), train["returns"], train["mask"]).item()
    return {"step": np.array(at), "test_mse": np.array(curve), "train_mse": tr}


def fit_archer(data: dict, *, privileged: bool = False, steps: int = 300, lr: float = 3e-3, tau: float = 0.1,
               seed: int = 0, progress: bool = False) -> dict:
    """Train ArCHer's double critic by TD on the episodes; advantages A = min Q - min V per turn.

    Returns the q / v loss curves, the advantage (N, H) and its mean on expert vs non-expert moves;
    ``progress``: a ``tqdm.auto`` bar over the TD steps.
    """
    from tqdm.auto import tqdm
    torch.manual_seed(seed)
    s = features(data, privileged)
    onehot = lambda a: torch.nn.functional.one_hot(a, 4).float()               # noqa: E731
    a, a_pi = onehot(data["action"]), onehot(data["action_pi"])
    critic = DoubleCritic(s.shape[-1], 4)
    target = copy.deepcopy(critic)
    opt = torch.optim.AdamW(critic.parameters(), lr=lr)
    ql, vl = [], []
    for _ in tqdm(range(steps), desc="ArCHer TD steps", disable=not progress):
        q_loss, v_loss = archer_losses(critic, target, s, a, a_pi, data["reward"], data["mask"], gamma=data["gamma"])
        opt.zero_grad()
        (q_loss + v_loss).backward()
        opt.step()
        soft_update(target, critic, tau)
        ql.append(q_loss.item())
        vl.append(v_loss.item())
    with torch.no_grad():
        A = archer(critic.q(s, a), critic.v(s), data["mask"])                   # (N, H)
    m, e = data["mask"], data["expert"]
    return {"q_loss": np.array(ql), "v_loss": np.array(vl), "adv": A.numpy(),
            "adv_expert": float(A[m & e].mean()), "adv_other": float(A[m & ~e].mean())}


def data_setting(p_expert: float, n_train: int, n_test: int) -> str:
    """The setting a critic-fitting figure names. Example: data_setting(0.9, 64, 256) ->
    "GridWorld 4x4, random maps, p_expert 0.9, 64 train / 256 held-out episodes"."""
    return f"{SETTING}, p_expert {p_expert:g}, {n_train} train / {n_test} held-out episodes"


def _log_ticks(ax):
    """Plain-number ticks on a log y axis (0.05, 0.1, 0.2, ... instead of 5 x 10^-2): at 1, 2 and 5 per decade,
    denser where the view spans about a decade or less, so a few labels are always shown."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter
    lo, hi = ax.get_ylim()
    dense = np.log10(hi / lo) < 1.2
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if dense else (1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _legend_below(ax, ncol: int = 1):
    """The axes' legend below its data (never over a curve), in the style's legend size."""
    ax.legend(fontsize=font_size("legend"), loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=ncol,
              borderaxespad=0.0)


def plot_value_fit(results: dict, ax=None, title: str = "", *, setting: str = SETTING, var=None):
    """Held-out value MSE vs fitting step for each critic in ``results`` (name -> fit_value output), on a log
    axis; ``var`` (the held-out returns' variance, a constant critic's error) as a dotted line; the title names
    ``setting``; the legend below the axes."""
    from matplotlib.ticker import MaxNLocator
    ax = ax if ax is not None else subplots(size=figsize(8, 4.6), layout="constrained")[1]
    for name, r in results.items():
        ax.plot(r["step"], r["test_mse"], label=f"{name} (final {r['test_mse'][-1]:.4f})",
                color=COLORS["privileged" if name.startswith("privileged") else "observable"])
    if var is not None:
        ax.axhline(var, color="k", ls=":", lw=1.5, label=f"constant critic (return variance {var:.4f})")
    ax.set_xlabel("critic fitting step (full-batch AdamW)")
    ax.set_ylabel("held-out MSE of V(s_k)")
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title or f"{setting}:\nheld-out value error, observable vs privileged critic",
                 fontsize=font_size("title"))
    _log_ticks(ax)
    _legend_below(ax)
    return ax


def plot_td_losses(arch: dict, setting: str = SETTING, ax=None):
    """ArCHer's Q and V TD losses per TD step (``fit_archer``'s output), log scale; the title names ``setting``
    and the mean advantage of expert vs other moves; the legend below the axes."""
    from matplotlib.ticker import MaxNLocator
    ax = ax if ax is not None else subplots(size=figsize(8, 4.6), layout="constrained")[1]
    ax.plot(arch["q_loss"], label="Q loss: Q(s, a) vs r + gamma Vbar(s')", color=COLORS["Q loss"])
    ax.plot(arch["v_loss"], label="V loss: V(s) vs Qbar(s, a_pi)", color=COLORS["V loss"])
    ax.set(yscale="log", xlabel="TD step (full-batch AdamW, target tau 0.1)", ylabel="TD loss (MSE)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"{setting}: ArCHer double critic\nmean A of expert moves {arch['adv_expert']:+.3f}, "
                 f"of other moves {arch['adv_other']:+.3f}", fontsize=font_size("title"))
    _log_ticks(ax)
    _legend_below(ax)
    return ax


def value_fits(p_expert: float = 0.9, n_train: int = 64, steps: int = 100, n_test: int = 128) -> tuple:
    """Observable and privileged critics fitted on ``n_train`` episodes (seed 0) of a ``p_expert`` behaviour,
    evaluated on ``n_test`` (seed 99) -> ({"observable": fit, "privileged": fit}, held-out return variance)."""
    tr, te = collect_grid(n_train, seed=0, p_expert=p_expert), collect_grid(n_test, seed=99, p_expert=p_expert)
    fits = {"observable": fit_value(tr, te, privileged=False, steps=steps),
            "privileged": fit_value(tr, te, privileged=True, steps=steps)}
    return fits, te["returns"][te["mask"]].var().item()


def value_panel(p_expert: float = 0.9, n_train: int = 64, steps: int = 100, n_test: int = 128):
    """Notebook 6's widget figure: ``value_fits`` drawn by ``plot_value_fit`` under ``data_setting``'s title
    (the notebook shows it through ``plots.shown``)."""
    fits, var = value_fits(p_expert, n_train, steps, n_test)
    return plot_value_fit(fits, setting=data_setting(p_expert, n_train, n_test), var=var).figure


def critic_arms(steps: int = 40) -> dict:
    """GRPO vs Turn-PPO (turn_gae, gamma 0.99, lambda 0.9, trainer-fitted critic) on GridWorld 4x4."""
    base = TrainConfig(env="gridworld", env_kwargs={"map_name": "4x4", "max_turns": 16}, prompts_per_step=4,
                       group_size=8, steps=steps, progress=False)
    return {"GRPO": base,
            "Turn-PPO (turn_gae)": replace(base, estimator="turn_gae",
                                           estimator_kwargs={"gamma": 0.99, "lam": 0.9}, critic_gamma=0.99)}


def plot_critic_panel(sweep: dict, key: str = "success_rate", arms=None, smooth_w: int = 5):
    """The learning curves of the sweep, two panels on one step axis: ``key`` above, the policy's gradient norm
    below on a log axis (Turn-PPO's turn-GAE advantages are not normalized, GRPO's are); mean +- s.e. over
    seeds (``draw_curves``), one legend, the suptitle naming ``CURVES_SETTING``."""
    fig, (top, bottom) = subplots(2, 1, size=figsize(8, 6.4), layout="constrained", sharex=True)
    what = lambda k: label(k) + (f" ({smooth_w}-step mean)" if smooth_w > 1 else "")   # noqa: E731
    draw_curves(top, arm_curves(sweep, key, arms, smooth_w), what(key), "RL step", label(key), colors=COLORS)
    draw_curves(bottom, arm_curves(sweep, "grad_norm", arms, smooth_w), what("grad_norm"), "RL step",
                "gradient norm (log)", colors=COLORS)
    top.tick_params(labelbottom=True)
    bottom.set_yscale("log")
    _log_ticks(bottom)
    bottom.get_legend().remove()
    fig.suptitle(CURVES_SETTING, fontsize=font_size("suptitle"))
    return fig

precompute = sweep_precompute("critics/curves.json", critic_arms, KEYS, 40, "toyrl.viz.critics")


if __name__ == "__main__":
    print(precompute())
