"""A multi-turn rollout made visible: tokens by kind, turn by turn, and the same rollout flat.

Dimension legend: B rollouts, T flat token positions, H turns.

A trajectory is ``prompt, a_1, o_1, a_2, o_2, ...``: policy tokens ``a_k`` (thinking tokens then
one action token, or an EOT = a void turn) interleaved with environment tokens ``o_k``. The
trainer sees it *flat* (one (T,) row of a ``TurnBatch``); the environment sees it *by turn* (one row
per turn). This module computes both views of one row, and draws them.

    ro, core, codec = sample_rollout("gridworld", n=4, seed=0)
    table, fig = turns_table(ro, row=0, core=core), plot_flat_vs_turns(ro, row=0, core=core)   # a row per turn; strips
"""
from __future__ import annotations

from functools import lru_cache
from typing import Optional

import matplotlib.patches as mpatches
import numpy as np
import torch

from ..envs import make_core
from ..envs.core import VOID
from ..train.build import build_policy
from ..rollout.flatten import Rollout, to_rollout
from ..rollout.play import rollout
from .credit_batch import noisy_expert, play_scripted
from .plots import KIND_COLORS, KINDS, log_columns, plot_log
from .setting import rollout_setting, run_setting
from .style import figsize, font_size, styled, subplots

__all__ = ["sample_rollout", "token_kinds", "token_labels", "flat_view", "turns_table", "turn_actions",
           "episode_texts", "plot_flat_vs_turns", "rollout_figure", "plot_turn_strips", "plot_training", "ENV_PRESETS",
           "EXPERT_SLIPS", "player", "LEGEND_KINDS"]

#: small settings of each env for drawing (MockSearch: 1 noise sentence so a turn fits a figure)
ENV_PRESETS = {
    "gridworld": {"map_name": "4x4", "max_turns": 8},
    "bandit_chain": {"stages": 3, "arms": 3, "layout_seed": 0, "max_turns": 6},
    "mock_search": {"noise_sentences": 1, "max_turns": 3, "hops": (1, 2)},
}
#: the ``"expert"`` player of ``sample_rollout``: the planner, a random move w.p. eps, of those a void turn w.p. p_void
EXPERT_SLIPS = {"eps": 0.3, "p_void": 0.3}


@lru_cache(maxsize=16)
def _cached(env: str, n: int, seed: int, temperature: float, policy: str, kw: tuple):
    core = make_core(env, n, seed=seed, **dict(kw))
    pol, codec = build_policy("tiny" if policy == "expert" else policy, core, "cpu", seed=seed)
    rng = np.random.default_rng(seed)
    tasks = np.repeat(core.sample_tasks(rng, 1), n, 0)                        # one group: same initial state
    group = np.zeros(n, dtype=np.int64)
    if policy == "expert":                                                    # the planner, with random slips
        chooser = noisy_expert(EXPERT_SLIPS["eps"], EXPERT_SLIPS["p_void"], seed)
        eps = play_scripted(core, codec, tasks, group, chooser, keep_states=False)
        return to_rollout(eps, codec, "cpu"), core, codec
    gen = torch.Generator().manual_seed(seed)
    ro = rollout(pol, core, tasks, group, codec=codec, temperature=temperature, generator=gen)
    return ro, core, codec


def sample_rollout(env: str = "gridworld", n: int = 4, seed: int = 0, *, temperature: float = 1.0,
                   policy: str = "tiny", env_kwargs: Optional[dict] = None) -> tuple[Rollout, object, object]:
    """One group of ``n`` rollouts on one task -> (Rollout, core, codec), played by an untrained toy
    policy (``policy`` = a preset name) or by the planner with random / void turns (``"expert"``).

    Deterministic in its arguments (cached): the same call returns the same objects, so treat them
    as read-only. ``env_kwargs`` default to ``ENV_PRESETS[env]``.
    """
    kw = ENV_PRESETS.get(env, {}) if env_kwargs is None else env_kwargs
    return _cached(env, int(n), int(seed), float(temperature), policy, tuple(sorted(kw.items())))


def player(policy: str = "tiny", seed: int = 0, temperature: float = 1.0) -> str:
    """Who plays a ``sample_rollout(..., seed=seed, policy=policy)`` group, as a figure names it.

    Example: player("tiny") -> "untrained tiny policy (T=1), seed 0"; player("expert", 2) ->
    "noisy planner (eps 0.3, void 0.3), seed 2".
    """
    if policy == "expert":
        return f"noisy planner (eps {EXPERT_SLIPS['eps']:g}, void {EXPERT_SLIPS['p_void']:g}), seed {seed}"
    return f"untrained {policy} policy (T={temperature:g}), seed {seed}"


def token_kinds(ro: Rollout, row: int) -> np.ndarray:
    """(T,) int codes into ``KINDS`` of row ``row``, read off its episode (prompt, then per turn the policy
    side's tokens and the env's): pad, prompt, think (reasoning tokens), end (END, the toy's ``</think>``,
    sampled or written by the grammar), action, void (every token of a void turn, or a token that voids
    it), obs. Example: BOS o o | t END a | SEP o | EOT | SEP o -> 1 1 1 2 6 3 5 5 4 5 5."""
    codec, ep = ro.codec, ro.episodes[row]
    kinds = [KINDS.index("prompt")] * len(ep.prompt)
    for t in ep.turns:
        g = np.asarray(t.gen)
        think = (g >= codec.think0) & (g < codec.act0)
        k = np.where((g >= codec.act0) & (g < codec.obs0), KINDS.index("action"), KINDS.index("void"))
        k = np.where(think, KINDS.index("think"), k)
        k = np.where(g == getattr(codec, "END", -1), KINDS.index("end"), k)
        kinds += [KINDS.index("void")] * len(g) if t.void else k.tolist()
        kinds += [KINDS.index("obs")] * len(t.obs)
    out = np.zeros(ro.batch.T, dtype=np.int64)                               # (T,) pad
    out[np.flatnonzero(ro.batch.turn_id[row].cpu().numpy() >= 0)] = kinds    # real tokens come first
    return out


def token_labels(ro: Rollout, row: int, core=None) -> list[str]:
    """(T,) short text of each token of row ``row``: BOS, SEP, EOT, END, think tokens ``t0``, actions by
    the env's ``action_text`` (or ``a3``), observation tokens decoded by the env where it can."""
    codec, tok = ro.codec, ro.batch.tokens[row].cpu().tolist()
    tid = ro.batch.turn_id[row].cpu().tolist()
    out = []
    for t, k in zip(tok, tid):
        if k < 0:
            out.append("")
        elif t in (codec.PAD, codec.BOS, codec.EOT, codec.SEP, getattr(codec, "END", -1)):
            out.append(("PAD", "BOS", "EOT", "SEP", "END")[t])
        elif t < codec.act0:
            out.append(f"t{t - codec.think0}")
        elif t < codec.obs0:
            a = t - codec.act0
            out.append(core.action_text(a) if core is not None else f"a{a}")
        else:
            out.append(_obs_label(core, t - codec.obs0))
    return out


def _obs_label(core, o: int) -> str:
    if core is None:
        return f"o{o}"
    if hasattr(core, "vocab"):                                               # MockSearch: a word vocabulary
        return core.vocab[o] if 0 <= o < len(core.vocab) else f"o{o}"
    if hasattr(core, "size") and hasattr(core, "map_name"):                  # GridWorld: tiles, then cells
        return "FHGS"[o] if o < 4 else f"@{divmod(o - 4, core.size)}".replace(" ", "")
    return f"o{o}"


def flat_view(ro: Rollout, row: int) -> dict:
    """The trainer's view of row ``row``: equal-length arrays over its real tokens (padding cut).

    Keys: tokens, turn_id, policy_mask, kind (codes into KINDS). ``len`` = real tokens.
    """
    b = ro.batch
    real = (b.turn_id[row] >= 0).cpu().numpy()
    return {"tokens": b.tokens[row].cpu().numpy()[real], "turn_id": b.turn_id[row].cpu().numpy()[real],
            "policy_mask": b.policy_mask[row].cpu().numpy()[real], "kind": token_kinds(ro, row)[real]}


def turn_actions(ro: Rollout, row: int) -> list[int]:
    """The env action of each turn of row ``row`` (``VOID`` = -1 for a void turn)."""
    codec, out = ro.codec, []
    for t in ro.episodes[row].turns:
        acts = [g - codec.act0 for g in t.gen if codec.act0 <= g < codec.obs0]
        out.append(VOID if t.void or len(acts) != 1 else acts[0])
    return out


def turns_table(ro: Rollout, row: int, core=None) -> list[dict]:
    """The environment's view of row ``row``: one dict per turn with the policy side's tokens (``policy``: what
    was sampled, END and void tokens too), the action, whether it was void, ``n_policy`` (tokens the policy
    sampled: ``policy_mask``, the ones the loss touches), ``n_grammar`` (policy-side tokens not sampled: END
    written by the grammar, a scripted player's tokens), ``n_env`` (observation tokens), the reward and the state
    key. The prompt (``len(ro.episodes[row].prompt)`` tokens) is in no turn, so
    ``prompt + sum(n_policy + n_grammar + n_env) == len(flat_view(ro, row)["tokens"])``."""
    labels = token_labels(ro, row, core)
    b = ro.batch
    tid, pm = b.turn_id[row].cpu().numpy(), b.policy_mask[row].cpu().numpy()
    kinds, first = token_kinds(ro, row), len(ro.episodes[row].prompt)
    obs = KINDS.index("obs")
    acts = turn_actions(ro, row)
    rows = []
    for k, t in enumerate(ro.episodes[row].turns):
        pos = np.flatnonzero(tid == k)
        pos = pos[pos >= first]                                                # drop the prompt (turn 0)
        side = [p for p in pos if kinds[p] != obs]
        rows.append({"turn": k, "policy": " ".join(labels[p] for p in side),
                     "action": "VOID" if acts[k] == VOID else (core.action_text(acts[k]) if core else str(acts[k])),
                     "void": bool(t.void), "n_policy": int(pm[side].sum()), "n_grammar": int((~pm[side]).sum()),
                     "n_env": len(pos) - len(side), "obs": " ".join(labels[p] for p in pos if kinds[p] == obs),
                     "reward": float(t.reward), "state_key": int(t.key) % 10007})
    return rows


def episode_texts(env: str, task, actions, env_kwargs: Optional[dict] = None) -> list[str]:
    """The env's text before each turn and after the last, replaying ``actions`` on task ``task``.

    A fresh one-copy core is reset to ``task`` and stepped with each action (``VOID`` = -1 allowed);
    exact for deterministic settings (with ``slip`` > 0 the replay draws its own slips).
    """
    kw = ENV_PRESETS.get(env, {}) if env_kwargs is None else env_kwargs
    core = make_core(env, 1, seed=0, **kw)
    core.reset(np.asarray(task)[None])
    texts = [core.render_text(0)]
    for a in actions:
        if core.done[0]:
            break
        core.step(np.array([a]))
        texts.append(core.render_text(0))
    return texts


def _short(label: str) -> str:
    """A token label cut to fit one cell: move[left] -> left, search[Valby] -> ?Valby, answer[x] -> !x."""
    if "[" in label and label.endswith("]"):
        name, arg = label[:-1].split("[", 1)
        label = {"search": "?", "answer": "!"}.get(name, "") + arg
    return label[:6]


LEGEND_KINDS = ("prompt", "think", "end", "action", "void", "obs")   #: the legend's kinds, in reading order


def _cell() -> tuple[float, float]:
    """(width, height) in inches of one token cell in the active style: wide enough for a 6-letter label at
    the cell font (``font_size("cell")``, 9 pt in "notebook"), so text and cells grow together; a line is
    twice the font's height, so a 9-line turn view and a 5-line flat row fit a slide."""
    pt = font_size("cell")
    return 5.0 * pt / 72, 2.0 * pt / 72


def _strip(ax, kinds: np.ndarray, labels: list, y: float = 0.0, x0: int = 0) -> None:
    """One line of token cells from column ``x0`` at height ``y``: coloured by kind, labelled at the cell font."""
    for x, (k, lab) in enumerate(zip(kinds, labels), start=x0):
        ax.add_patch(mpatches.Rectangle((x, y), 0.95, 0.9, color=KIND_COLORS[KINDS[k]]))
        if lab:
            ax.text(x + 0.47, y + 0.45, _short(lab), ha="center", va="center", fontsize=font_size("cell"),
                    clip_on=True, color="white" if KINDS[k] in ("action", "void", "obs") else "black")


def _kinds_legend(fig) -> None:                                              # the token colours, under the panels
    handles = [mpatches.Patch(color=KIND_COLORS[k], label=k) for k in LEGEND_KINDS]
    fig.legend(handles=handles, fontsize=font_size("legend"), ncol=len(handles), loc="outside lower center",
               title="token kind", title_fontsize=font_size("legend"))


def _flat_strip(ax, kinds: np.ndarray, labels: list, tid: np.ndarray, per_line: int) -> None:
    """The flat row on ``ax``, wrapped every ``per_line`` tokens (line i holds t = i * per_line ...), turn
    boundaries dashed."""
    n = len(kinds)
    n_lines = max(1, -(-n // per_line))
    for i in range(n_lines):
        sl = slice(i * per_line, (i + 1) * per_line)
        _strip(ax, kinds[sl], labels[sl], y=-i)
    for t in np.flatnonzero(np.diff(tid) != 0) + 1:                        # a new turn starts at token t
        i, c = divmod(int(t), per_line)
        ax.plot([c - 0.025, c - 0.025], [-i - 0.05, -i + 0.95], color="black", ls="--", lw=font_size("cell") / 7)
    ax.set_xlim(0, min(max(n, 1), per_line))
    ax.set_ylim(-n_lines + 1, 1)
    ax.set_yticks([-i + 0.45 for i in range(n_lines)])
    ax.set_yticklabels([f"t {i * per_line}-{min((i + 1) * per_line, n) - 1}" for i in range(n_lines)],
                       fontsize=font_size("tick"))
    ax.set_xticks([])
    ax.set_ylabel("positions", fontsize=font_size("label"))


@styled
def plot_flat_vs_turns(ro: Rollout, row: int = 0, core=None, *, max_tokens: int = 80,
                       per_line: Optional[int] = None, played_by: Optional[str] = None):
    """Top: the flat token sequence of row ``row`` coloured by kind (END, the toy's ``</think>``, its own
    colour), read like text: ``per_line`` tokens a line (default: what fits a 10 in figure in the style), turn
    boundaries dashed; the first ``max_tokens`` tokens. Bottom: the same tokens
    re-laid one turn per line (what the env saw), prompt first; a line longer than the panel names its length.
    The title names ``rollout_setting(ro, core, played_by)`` and the row. Token labels are at the style's
    cell font (9 pt in "notebook"); ``style="slides"`` for a room."""
    view = flat_view(ro, row)
    per_line = per_line or max(8, int((figsize(10, 1)[0] - 1.8) / _cell()[0]))
    labels = [lab for lab in token_labels(ro, row, core) if lab][:max_tokens]
    kinds, tid = view["kind"][:max_tokens], view["turn_id"][:max_tokens]
    n_prompt = len(ro.episodes[row].prompt)
    first = min(n_prompt, len(kinds))                                       # the prompt ends where turn 0 starts
    lines = [np.arange(first)] + [np.flatnonzero((tid == k) & (np.arange(len(tid)) >= first))
                                 for k in range(int(tid.max()) + 1 if len(tid) else 0)]
    cols = max(min(max(len(kinds), 1), per_line), 10)
    (cw, ch), n_flat = _cell(), max(1, -(-len(kinds) // per_line))
    top_h, bot_h = 0.5 + ch * n_flat, 0.5 + ch * len(lines)
    fig, (top, bot) = subplots(2, 1, size=(max(1.8 + cw * cols, figsize(10, 1)[0]), top_h + bot_h + 1.2),
                               gridspec_kw={"height_ratios": [top_h, bot_h]}, layout="constrained")
    _flat_strip(top, kinds, labels, tid, per_line)
    shown = f", the first {len(kinds)}" if len(kinds) < len(view["tokens"]) else ""
    top.set_xlabel(f"flat row: token position t, {per_line} a line{shown} (dashed: turn boundaries)",
                   fontsize=font_size("label"))
    n_pol, n_env = int(view["policy_mask"].sum()), int((view["kind"] == KINDS.index("obs")).sum())
    top.set_title(f"flat view: row {row}, {len(view['tokens'])} tokens = {n_prompt} prompt + {n_pol} sampled by the "
                  f"policy + {len(view['tokens']) - n_prompt - n_pol - n_env} written for it + {n_env} env",
                  fontsize=font_size("title"), wrap=True)
    for j, pos in enumerate(lines):
        _strip(bot, kinds[pos], [labels[p] for p in pos], y=-j)
    bot.set_xlim(0, cols)
    bot.set_ylim(-len(lines) + 1, 1)
    names = ["prompt"] + [f"turn {k}" for k in range(len(lines) - 1)]
    bot.set_yticks([-j + 0.45 for j in range(len(lines))])
    bot.set_yticklabels([nm + (f" ({len(p)})" if len(p) > cols else "") for nm, p in zip(names, lines)],
                        fontsize=font_size("tick"))
    bot.set_xticks([])
    longer = " (a longer line: its length in brackets)" if max(map(len, lines)) > cols else ""
    bot.set_xlabel("token within the line" + longer, fontsize=font_size("label"))
    bot.set_ylabel("line", fontsize=font_size("label"))
    bot.set_title("turn view: the same tokens, one turn per line", fontsize=font_size("title"))
    _kinds_legend(fig)
    fig.suptitle(f"{rollout_setting(ro, core, played_by)}: row {row}", fontsize=font_size("suptitle"), wrap=True)
    return fig


@styled
def plot_turn_strips(ro: Rollout, core=None, *, rows: Optional[list] = None, max_turns: int = 8,
                     max_tokens: Optional[int] = None, played_by: Optional[str] = None):
    """One panel per row (default rows 0 and 1), one above the other: one strip per turn, policy tokens vs env
    tokens, how long each turn is (the first ``max_tokens`` shown; default: what fits a 10 in figure in the
    style) and where void turns happen. The title names ``rollout_setting``."""
    rows = list(range(min(ro.batch.B, 2))) if rows is None else list(rows)
    ncols, nrows = 1, len(rows)
    cw, ch = _cell()
    max_tokens = max_tokens or max(4, int((figsize(10, 1)[0] - 1.3) / cw))
    fig, axes = subplots(nrows, ncols, size=(1.3 + cw * max_tokens, nrows * (0.9 + ch * max_turns) + 1.6),
                         sharex=True, squeeze=False, layout="constrained")
    for j, (ax, r) in enumerate(zip(axes.flat, rows)):
        view, labels = flat_view(ro, r), [lab for lab in token_labels(ro, r, core) if lab]
        tid, first = view["turn_id"], len(ro.episodes[r].prompt)
        for k in range(min(int(tid.max()) + 1, max_turns)):
            pos = np.flatnonzero((tid == k) & (np.arange(len(tid)) >= first))
            _strip(ax, view["kind"][pos], [labels[p] for p in pos], y=-k)
        ax.set_xlim(0, max_tokens)
        ax.set_ylim(-max_turns + 1, 1)
        ax.set_yticks([-k + 0.45 for k in range(max_turns)])
        ax.set_yticklabels([f"turn {k}" for k in range(max_turns)], fontsize=font_size("tick"))
        ax.set_ylabel("turn", fontsize=font_size("label"))
        ax.set_xticks([])
        ax.set_xlabel(f"token within the turn (first {max_tokens})", fontsize=font_size("label"))
        ax.set_title(f"row {r}: R={float(ro.batch.outcome()[r]):.0f}", fontsize=font_size("title"))
    _kinds_legend(fig)
    fig.suptitle(f"{rollout_setting(ro, core, played_by)}: the first {max_turns} turns of rows "
                 f"{', '.join(map(str, rows))}", fontsize=font_size("suptitle"), wrap=True)
    return fig


@styled
def rollout_figure(env: str = "gridworld", row: int = 0, seed: int = 0, policy: str = "tiny", n: int = 4):
    """The widget figure of notebook 00: ``plot_flat_vs_turns`` of one row of ``sample_rollout``, its
    title naming the env, the ``player`` and the group."""
    ro, core, _ = sample_rollout(env, n=n, seed=seed, policy=policy)
    return plot_flat_vs_turns(ro, min(row, ro.batch.B - 1), core, played_by=player(policy, seed))


@styled
def plot_training(log, keys=("reward_mean", "reward_std", "entropy", "turns_per_episode"), window: int = 5):
    """The curves of a training RunLog (one panel per key, grey raw, dark smoothed over ``window`` steps, two
    panels a line), titled with ``run_setting(log.config)`` (a list of rows without a config: the number of
    steps). The default keys leave out ``success_rate`` (equal to ``reward_mean`` where the reward is 1 at the
    goal and 0 elsewhere) and ``void_turn_rate`` (0 under the turn grammar): pass them where they differ."""
    config = getattr(log, "config", None)
    setting = run_setting(config) if config else f"training log, {len(log_columns(log, ['step'])['step'])} steps"
    smoothed = f"\n(dark line: mean of the last {window} steps)" if window > 1 else ""
    return plot_log(log, list(keys), window=window, ncols=2, title=setting + smoothed)
