"""Writing a claim's result: the JSON file, its series and its figure (each whole, ``toyrl.lab.results.atomic_write``),
and the ledger's table (``docs/claims.md``).

The figure (``claim_figure``, saved by ``write_figure`` in the "slides" style of ``toyrl.viz.style``: at
least 1600 px wide) shows the claim's curve per arm and, per metric its tests use, every arm those tests
compare (``tested_arms``), each seed and the mean with its 95% interval.

The table lives between ``<!-- claims:start -->`` and ``<!-- claims:end -->`` of its page; only that span
is replaced, and a page without both markers is left untouched (with a warning). Each row gives a test's marks
(``judge.py``: cannot fail, cannot pass, repeats) and the reading of the two seed blocks by ``stats.FLIP_RULE``.
"""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Optional

import numpy as np

from ..results import atomic_write
from .spec import smooth, tokens_per_episode

__all__ = ["write_json", "write_series", "load_series", "write_figure", "claim_figure", "tested_arms", "arm_order",
           "setting_label", "seed_band", "claims_table", "findings", "update_page", "START", "END"]

START, END = "<!-- claims:start -->", "<!-- claims:end -->"


def write_json(path: Path, record: dict) -> None:
    atomic_write(Path(path), (json.dumps(record, indent=1) + "\n").encode())


def _round(v):
    if isinstance(v, list):
        return [_round(x) for x in v]
    if isinstance(v, float):
        return None if not np.isfinite(v) else float(f"{v:.5g}")
    return v


def write_series(path: Path, name: str, runs: dict) -> None:
    """Every run's series, gzipped JSON: {"claim", "arms": {arm: {seed: {key: [...]}}}} (5 significant digits)."""
    import gzip
    arms = {a: {str(s): {k: _round(v) for k, v in r["series"].items()} for s, r in d.items()} for a, d in runs.items()}
    atomic_write(Path(path), gzip.compress(json.dumps({"claim": name, "arms": arms}).encode(), mtime=0))


def load_series(path: Path) -> dict:
    """arm -> seed (int) -> series, as written by ``write_series`` (None back to NaN)."""
    import gzip
    arms = json.loads(gzip.decompress(Path(path).read_bytes()))["arms"]
    nan = lambda v: [float("nan") if x is None else x for x in v] if isinstance(v, list) else v   # noqa: E731
    return {a: {int(s): {k: nan(v) for k, v in r.items()} for s, r in d.items()} for a, d in arms.items()}


def _curve(series: dict, key: str) -> np.ndarray:
    if key == "tokens_per_episode":
        return tokens_per_episode(series)
    return np.asarray(series.get(key, []), dtype=float)


def seed_band(ax, Y: np.ndarray, x: np.ndarray, color, label: str, *, kind: str = "t", ls: str = "-",
              note: bool = True) -> None:
    """Mean over seeds (rows of Y) with a band per x, one legend entry: kind "t" a 95% t interval of the
    mean, "range" the min..max over seeds (readable with 3 seeds, where t_{0.975,2} = 4.3). The line and its
    band share ``label`` (with ``note``: plus "(mean, 95% band)"); ``ls`` is the line's style."""
    from scipy import stats as st
    n = np.isfinite(Y).sum(0)
    m = np.nanmean(Y, 0)
    if kind == "range":
        lo, hi, what = np.nanmin(Y, 0), np.nanmax(Y, 0), "min-max over seeds"
    else:
        sd = np.nanstd(Y, 0, ddof=1) if Y.shape[0] > 1 else np.zeros_like(m)
        half = np.where(n > 1, st.t.ppf(0.975, np.maximum(n - 1, 1)) * sd / np.sqrt(np.maximum(n, 1)), 0.0)
        lo, hi, what = m - half, m + half, "95% band"
    text = f"{label} (mean, {what})" if note else label
    ax.fill_between(x, lo, hi, color=color, alpha=0.2, lw=0, label=text)
    ax.plot(x, m, color=color, ls=ls, label=text)


def arm_order(claim, series: Optional[dict] = None) -> list:
    """The arms a claim's figure draws, in the claim's order (then any other arm the series holds)."""
    return list(claim.arms) + [a for a in (series or {}) if a not in claim.arms]


def tested_arms(claim) -> dict:
    """metric -> the arms the claim's tests compare on it (a test's arm and its baseline), in arm order:
    what the figure's metric panels must draw. Example (clip_tolerance): {"early_success": ["cispo", "sapo",
    "gspo"], "peak_drop": ["cispo", "sapo", "gspo"]}."""
    out: dict = {}
    for t in claim.tests:
        out.setdefault(t.metric, set()).update(t.compared())
    return {m: [a for a in arm_order(claim) if a in arms] for m, arms in out.items()}


_LINESTYLES = ("-", "--", ":", "-.")


def _curves(ax, claim, series: dict) -> None:
    """Left panel: each arm's curve (a colour per arm, a line style per series key), mean and 95% band."""
    from ...viz.plots import legend
    from ...viz.style import font_size
    keys = (claim.curve,) if isinstance(claim.curve, str) else tuple(claim.curve)
    for i, arm in enumerate(a for a in arm_order(claim, series) if a in series):
        for k, key in enumerate(keys):
            curves = [_curve(r, key) for r in series[arm].values()]
            n = min((len(x) for x in curves), default=0)
            if n == 0:
                continue
            Y = np.stack([x[:n] for x in curves])                                  # (S, n)
            x = np.arange(n)
            if not claim.measure:
                ok = np.isfinite(Y).any(0)                                         # eval columns: only eval steps
                Y, x = (Y[:, ok], x[ok]) if ok.sum() < n else (np.stack([smooth(y, 5) for y in Y]), x)
            seed_band(ax, Y, x, f"C{i % 10}", arm if len(keys) == 1 else f"{arm}: {key}",
                      ls=_LINESTYLES[k % len(_LINESTYLES)], note=False)
    ax.set_xlabel("measured batch" if claim.measure and "grad" in str(keys) else
                  "turn index" if claim.measure else "RL step")
    ax.set_ylabel(claim.curve_label or " / ".join(keys) + ("" if claim.measure else " (5-step mean)"))
    ax.set_title("per arm: mean over seeds, 95% t band")
    n_entries = len(ax.get_legend_handles_labels()[1])
    legend(ax, fontsize=font_size("legend"), frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16),
           ncol=min(3, max(1, n_entries)))


def _metric_panel(bx, claim, record: dict, metric: str, arms: list) -> None:
    """One tested metric: per arm its per-seed values (grey) and mean with 95% t interval (the arm's colour);
    the threshold of a single-arm test as a dashed line."""
    order = arm_order(claim)
    for j, arm in enumerate(arms):
        r = record["result"]["arms"].get(arm, {}).get(metric)
        if r is None:
            continue
        vals = np.array([np.nan if v is None else v for v in r["per_seed"]], float)
        bx.scatter(np.full(len(vals), j) + np.linspace(-0.12, 0.12, len(vals)), vals, s=18, color="0.55",
                   label="one seed" if j == 0 else None, zorder=2)
        if r["mean"] is not None:
            lo, hi = r["ci95"]
            bx.errorbar([j], [r["mean"]], yerr=[[r["mean"] - lo], [hi - r["mean"]]], fmt="o", capsize=4,
                        color=f"C{order.index(arm) % 10}", ms=7, label="mean, 95% t interval" if j == 0 else None,
                        zorder=3)
    bounds = dict.fromkeys((t.sign, t.threshold) for t in claim.tests if t.metric == metric and not t.baseline)
    for k, (sign, thr) in enumerate(bounds):
        bx.axhline(thr, color="0.3", ls=("--", ":", "-.")[k % 3], lw=1.4, label=f"claimed {'>' if sign > 0 else '<'} {thr:g}")
    bx.set_xticks(range(len(arms)), arms, rotation=30 if len(arms) > 2 else 0, ha="right" if len(arms) > 2 else "center")
    bx.set_xlim(-0.6, len(arms) - 0.4)
    bx.set_xlabel("arm")
    bx.set_ylabel("value per seed")
    bx.set_title("\n".join(textwrap.wrap(metric.replace("_", " "), 18)))


LABEL_KEYS = ("policy", "lora_r", "size", "map_name", "stages", "slip", "dense", "prompts_per_step", "group_size", "lr",
              "ppo_epochs", "staleness", "think_max", "constrain", "bc_steps", "grad_clip", "context", "context_k",
              "estimator")
"""setting fields named in a figure title when the claim's base sets them"""


def setting_label(base: dict, arms: Optional[dict] = None) -> str:
    """A short title naming the setting (arms that change the env add their env's name).

    Example: {"env": "gridworld", "env_kwargs": {"size": 4}, "lr": 0.01} -> "gridworld size=4, lr=0.01".
    """
    flat = {**base.get("env_kwargs", {}), **{k: v for k, v in base.items() if k != "env_kwargs"}}
    parts = [f"{k}={flat[k]}" for k in LABEL_KEYS if k in flat]
    envs = [base.get("env", "?")] + [a["env"] for a in (arms or {}).values() if "env" in a]
    return " / ".join(dict.fromkeys(envs)) + " " + ", ".join(parts)


def claim_figure(claim, series: dict, record: dict):
    """The claim's figure: left, its curve per arm (``_curves``); right, one panel per metric its tests
    use, drawing every arm those tests compare (``tested_arms``). ``series``: arm -> seed -> series. Sized
    and lettered by the active style (``toyrl.viz.style``; ``write_figure`` draws in "slides")."""
    from ...viz.style import figsize, subplots
    panels = tested_arms(claim)
    widths = [6.0] + [max(3.0, 0.55 * len(a) + 1.4) for a in panels.values()]
    fig, axes = subplots(1, len(widths), size=figsize(sum(widths), 4.6), squeeze=False, layout="constrained",
                         gridspec_kw={"width_ratios": widths})
    _curves(axes[0, 0], claim, series)
    marks: dict = {}
    for bx, (metric, arms) in zip(axes[0, 1:], panels.items()):
        _metric_panel(bx, claim, record, metric, arms)
        for h, lab in zip(*bx.get_legend_handles_labels()):
            marks.setdefault(lab, h)
    fig.legend(list(marks.values()), list(marks), loc="outside lower right", frameon=False, ncol=min(4, len(marks)))
    n = len(record["seeds"])
    setting = textwrap.fill(setting_label(claim.base, claim.arms), width=int(9 * sum(widths)))  # ~9 characters an inch
    fig.suptitle(f"{claim.name}: {record['verdict']} ({n} seeds{', quick' if record['setting'].get('quick') else ''})"
                 f"\n{setting}")
    return fig


def write_figure(path: Path, claim, series: dict, record: dict, *, style: str = "slides") -> None:
    """``claim_figure`` in ``style`` (default "slides": at least 1600 px wide, text >= 12.8 pt), saved whole
    to ``path`` as a 256-colour palette PNG (``toyrl.viz.style.png_bytes``: about a third of the bytes)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from ...viz.style import figure_style, png_bytes
    with figure_style(style):
        fig = claim_figure(claim, series, record)
        data = png_bytes(fig)
    plt.close(fig)
    atomic_write(path, data)


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def _cell(text: str) -> str:
    """Table-safe text: a literal | would split the cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _test_cell(t: dict) -> str:
    e = t["effect"]
    tag = {"passed": "pass", "contradicted": "**contradicted**"}.get(t.get("outcome"), "inconclusive")
    marks = "".join(f"; **{m['mark']}**: {m['why']}" if m["mark"] != "note" else f"; {m['why']}"
                    for m in t.get("marks", []))
    return (f"{t['name']} {t['claimed']}: {_fmt(e['mean'])} [{_fmt(e['ci95'][0])}, {_fmt(e['ci95'][1])}] "
            f"({tag}{marks})")


LLM_PREFIX = "smollm2_"
"""a claim named LLM_PREFIX + NAME re-registers the toy's claim NAME with SmolLM2 as the policy (``llm.py``)"""


def _numbers(xs: list) -> str:
    """[1, 2, 3, 5] -> "1-3, 5"."""
    runs, out = [], []
    for x in xs:
        if runs and x == runs[-1][-1] + 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    for r in runs:
        out.append(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)))
    return ", ".join(out)


def _blocks_cell(b: dict) -> str:
    """The flip rule's reading of two blocks: "holds (tests 1-3 on both)", "**flips**: v1 / v2 (test 2 flips)", "-"."""
    if b["status"] == "one block":
        return "-"
    both = f"test{'s' if len(b['both']) > 1 else ''} {_numbers(b['both'])} on both" if b["both"] else "no test on both"
    flips = f"; test{'s' if len(b['flipped']) > 1 else ''} {_numbers(b['flipped'])} flip{'' if len(b['flipped']) > 1 else 's'}" \
        if b["flipped"] else ""
    if b["status"] == "holds":
        return f"holds ({both}{flips})"
    return f"**flips**: {b['verdicts'][0]} / {b['verdicts'][1]} ({both}{flips})"


def claims_table(records: list, heldout: Optional[dict] = None, *, link: str = "") -> str:
    """Markdown table of claim records (one row each: verdict, seeds, every test's effect with its interval and
    marks); ``link`` prefixes each record's path (``"../"`` from ``docs/``).

    A record without a result (registered, not yet run) reads "registered, not yet run". ``heldout`` (name ->
    record of the same claim on another seed block, e.g. ``data/claims/heldout/``) adds that block's verdict,
    shown only where it ran the same setting (otherwise "-": a held-out run of an older setting says nothing about
    this one), and the flip rule's reading of the two blocks (``stats.across_blocks``). Where a toy claim NAME has
    a twin ``smollm2_NAME`` among ``records``, an "on SmolLM2" column gives the twin's verdicts on both blocks.
    """
    from .stats import across_blocks
    heldout = heldout or {}
    by_name = {r["name"]: r for r in records}
    twins = {r["name"]: by_name[LLM_PREFIX + r["name"]] for r in records if LLM_PREFIX + r["name"] in by_name}
    lines = ["| # | claim | source | verdict | seeds | tests (effect, 95% t CI, outcome after Holm; marks) |"
             + (" held-out block | across blocks |" if heldout else "") + (" on SmolLM2 |" if twins else ""),
             "|---|---|---|---|---|---|" + ("---|---|" if heldout else "") + ("---|" if twins else "")]
    for i, r in enumerate(records, 1):
        src = r["source"].split(":")[0]
        seeds = r.get("seeds") or []
        if "result" not in r:
            v, eff = "registered, not yet run", "planned: " + "; ".join(
                f"{t['name']} {t['claimed']}" for t in r.get("tests_planned", []))
        else:
            v, eff = r["verdict"], "; ".join(_test_cell(t) for t in r["result"]["tests"])
        span = f"{len(seeds)} ({seeds[0]}-{seeds[-1]})" if seeds and "result" in r else "-"
        text = r["claim"] + (f" *Untested here: {r['untested']}*" if r.get("untested") else "")
        row = (f"| {i} | [{r['name']}]({link}data/claims/{r['name']}.json): {_cell(text)} | {_cell(src)} | "
               f"**{v}** | {span} | {_cell(eff)} |")
        if "result" not in r:
            row = row.replace(f"{link}data/claims/{r['name']}.json", f"{link}data/claims/{r['name']}.pending.json")
        if heldout:
            other = heldout.get(r["name"])
            row += f" {_heldout_cell(r, other)} | {_blocks_cell(across_blocks(r, other))} |"
        if twins:
            row += f" {_twin_cell(twins.get(r['name']), heldout, link)} |"
        lines.append(row)
    return "\n".join(lines)


def findings(records: list, heldout: dict) -> dict:
    """The flip rule over the ledger: {"holds": {name: verdict}, "flips": {name: (v1, v2)}, "one block": [names]}
    for the records that have a result, in ledger order (``stats.across_blocks``)."""
    from .stats import across_blocks
    out: dict = {"holds": {}, "flips": {}, "one block": []}
    for r in records:
        if "result" not in r:
            continue
        b = across_blocks(r, heldout.get(r["name"]))
        if b["status"] == "holds":
            out["holds"][r["name"]] = r["verdict"]
        elif b["status"] == "flips":
            out["flips"][r["name"]] = tuple(b["verdicts"])
        else:
            out["one block"].append(r["name"])
    return out


def _twin_cell(twin: Optional[dict], heldout: dict, link: str = "") -> str:
    """The SmolLM2 twin's verdict with its seeds, and its held-out block's beside it; "-" without a twin."""
    if twin is None:
        return "-"
    seeds = twin.get("seeds") or []
    own = f"**{twin['verdict']}** ({seeds[0]}-{seeds[-1]})" if "result" in twin and seeds else "pending"
    other = _heldout_cell(twin, heldout.get(twin["name"]))
    return f"[{twin['name']}]({link}data/claims/{twin['name']}.json): {own}" + ("" if other == "-" else f"; {other}")


def _heldout_cell(record: dict, other: Optional[dict]) -> str:
    """The held-out block's verdict and seeds, if it ran the same setting with a result; else "-"."""
    if not other or "result" not in other or other.get("setting") != record.get("setting"):
        return "-"
    seeds = other.get("seeds") or []
    span = f" ({seeds[0]}-{seeds[-1]})" if seeds else ""
    return f"{other['verdict']}{span}"


def update_page(page: Path, table: str, footer: str = "") -> bool:
    """Replace the text between the claims markers of ``page`` with ``table``; False (file untouched) if absent."""
    page = Path(page)
    if not page.exists():
        print(f"warning: {page} not found; claims table not written", file=sys.stderr)
        return False
    text = page.read_text()
    i, j = text.find(START), text.find(END)
    if i < 0 or j < 0 or j < i:
        print(f"warning: {page} has no {START} ... {END} markers; left untouched", file=sys.stderr)
        return False
    new = text[:i + len(START)] + "\n" + table + ("\n\n" + footer if footer else "") + "\n" + text[j:]
    if new != text:
        atomic_write(page, new.encode())
    return True
