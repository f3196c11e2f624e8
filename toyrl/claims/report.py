"""Writing a claim's result: the JSON file (atomically), its figure, and the README claims table.

The README table lives between ``<!-- claims:start -->`` and ``<!-- claims:end -->``; only that span
is replaced, and a README without both markers is left untouched (with a warning).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from .spec import smooth, tokens_per_episode

__all__ = ["write_json", "write_figure", "claims_table", "update_readme", "START", "END"]

START, END = "<!-- claims:start -->", "<!-- claims:end -->"


def _atomic_write(path: Path, data: bytes) -> None:
    """Write to a temp file in the same folder, then rename over ``path``: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: Path, record: dict) -> None:
    _atomic_write(Path(path), (json.dumps(record, indent=1) + "\n").encode())


def _curve(series: dict, key: str) -> np.ndarray:
    if key == "tokens_per_episode":
        return tokens_per_episode(series)
    return np.asarray(series[key], dtype=float)


def write_figure(path: Path, claim, runs: dict, record: dict) -> None:
    """Left: the claim's curve per arm (mean over seeds, thin lines per seed). Right: the first test's
    metric per seed and arm, with the mean and 95% interval."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(8.0, 2.8), gridspec_kw={"width_ratios": [1.6, 1]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    keys = (claim.curve,) if isinstance(claim.curve, str) else tuple(claim.curve)
    lines = [(arm, key) for arm in runs for key in keys]
    for j, (arm, key) in enumerate(lines):
        c = colors[j % len(colors)]
        curves = [_curve(r["series"], key) for r in runs[arm].values()]
        n = min(len(x) for x in curves)
        if n == 0:
            continue
        Y = np.stack([x[:n] if claim.measure else smooth(x[:n], 5) for x in curves])          # (S, n)
        for y in Y:
            ax.plot(y, color=c, lw=0.5, alpha=0.35)
        ax.plot(np.nanmean(Y, 0), color=c, lw=1.8, label=arm if len(keys) == 1 else f"{arm}: {key}")
    ax.set_xlabel("turn index" if claim.measure else "step")
    ax.set_ylabel(" / ".join(keys) + ("" if claim.measure else " (5-step mean)"), fontsize=8)
    ax.legend(fontsize=7, frameon=False)
    test = claim.tests[0]
    arms = [test.arm] + ([test.baseline] if test.baseline else [])
    for j, arm in enumerate(arms):
        r = record["result"]["arms"][arm][test.metric]
        vals = np.array([np.nan if v is None else v for v in r["per_seed"]], float)
        bx.scatter(np.full(len(vals), j) + np.linspace(-0.1, 0.1, len(vals)), vals, s=12, color="0.5")
        if r["mean"] is not None:
            lo, hi = r["ci95"]
            bx.errorbar([j], [r["mean"]], yerr=[[r["mean"] - lo], [hi - r["mean"]]], fmt="o", color="k", capsize=3)
    bx.set_xticks(range(len(arms)), arms, fontsize=7)
    bx.set_ylabel(test.metric, fontsize=8)
    bx.set_xlim(-0.6, len(arms) - 0.4)
    fig.suptitle(f"{claim.name}: {record['verdict']}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=72)
    plt.close(fig)
    os.replace(tmp, path)


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def _cell(text: str) -> str:
    """Table-safe text: a literal | would split the cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def claims_table(records: list) -> str:
    """Markdown table of claim records (one row each, key effect with its interval)."""
    lines = ["| # | claim | source | verdict | key result (effect, 95% CI) |", "|---|---|---|---|---|"]
    for i, r in enumerate(records, 1):
        eff = "; ".join(f"{t['name']}: {_fmt(t['effect']['mean'])} [{_fmt(t['effect']['ci95'][0])}, "
                        f"{_fmt(t['effect']['ci95'][1])}]" for t in r["result"]["tests"])
        src = r["source"].split(":")[0]
        lines.append(f"| {i} | [{r['name']}](data/claims/{r['name']}.json): {_cell(r['claim'])} | {_cell(src)} | "
                     f"**{r['verdict']}** | {_cell(eff)} |")
    return "\n".join(lines)


def update_readme(readme: Path, table: str, footer: str = "") -> bool:
    """Replace the text between the claims markers with ``table``; False (file untouched) if absent."""
    readme = Path(readme)
    if not readme.exists():
        print(f"warning: {readme} not found; claims table not written", file=sys.stderr)
        return False
    text = readme.read_text()
    i, j = text.find(START), text.find(END)
    if i < 0 or j < 0 or j < i:
        print(f"warning: {readme} has no {START} ... {END} markers; README left untouched", file=sys.stderr)
        return False
    new = text[:i + len(START)] + "\n" + table + ("\n\n" + footer if footer else "") + "\n" + text[j:]
    if new != text:
        _atomic_write(readme, new.encode())
    return True
