"""Did this run collapse, or did it freeze? Two rules on the per-step series of one run.

Dimension legend: N steps of a run. Every input is one (N,) series: the mean reward ``mean``, the
within-group reward std ``std`` (RAGEN's early signal, arXiv 2504.20073) and the gradient norm
``grad_norm`` of the update taken after the step was measured.

**Collapse.** With m_t the trailing ``w``-step mean of the mean reward and P_t = max_{s <= t} m_s its
running peak *from step 0*, a collapse happens at the first step t with

    P_t >= min_peak                                                  (it had learned something)
    m_u < frac * P_t    for every u in [t, e]                       (the fall persists)
    g_v > 0 (finite)    for some v in [p, e]                        (something was learning)

where e is the last step of the run (``persist=None``) or t + persist - 1, and p <= t is the last step
at which m reached P_t. Why each part:

- *running peak from step 0*: an argmax over the whole run misses a crash right after a behaviour-
  cloning start whenever a later peak is higher; the running peak counts the BC start's first steps;
- *persistence*: a dip that recovers is noise in a mean measured on a few tasks, not a collapse;
- *a non-zero gradient in the fall*: GRPO with 0/1 rewards and no KL freezes once every group agrees
  (A = 0, so the gradient is exactly 0). A run whose gradient is zero from its peak to the end of the
  fall did not learn its way down; a 4-task mean dipping under a frozen policy is measurement noise.
  (AdamW still moves weights on a zero gradient through its momentum; that drift is logged as
  ``update_norm`` and is a separate claim, not a collapse of the RL objective.)

**Freeze.** A span of at least ``min_len`` steps in which no update is driven by a gradient (g_t = 0,
or not finite: no update was taken) while the reward is *held*:

    mean of the span > 0   and   |mean(second half) - mean(first half)| <= tol

Why "held" is defined on halves: a frozen policy is measured on fresh tasks each step, so with 4
tasks the per-step mean jumps by 0.25 from task luck alone; the start value of the span is one noisy
draw, while a half-span average is several. The level must be above 0, since a policy that fails
every task also has A = 0 (silent, not frozen). "Zero gradient, so the policy did not change" is
not assumed: AdamW's momentum moves a frozen policy (a zero gradient still steps along the moment
estimates), and such a span is reported as no freeze rather than as one.

``classify`` applies both rules (and the std-drop lead) and is what the ledger, the scorecard and
notebook 02 read; ``RULE`` holds the ledger's settings, named ``RULE_NAME`` in stored results.

**Collapse against the task's floor** (``floor_collapse_step``, named ``FLOOR_RULE_NAME``): the same rule on
the success measured above the no-information level f of the task (the success of the same policy with its
reasoning scrambled), n_t = (m_t - f) / (P_t - f). Where forgetting the reasoning leaves half the success (the
blind T-maze: f near 1/2), the plain rule's line 0.5 x P_t sits on f and a run that forgets cannot cross it;
measured from f, forgetting is n near 0, a collapse.
"""
from __future__ import annotations

import warnings
from typing import Optional

import numpy as np

__all__ = ["RULE_NAME", "RULE", "FLOOR_RULE_NAME", "smooth", "collapse_step", "std_drop_step", "freeze_span",
           "classify", "floor_normalized", "floor_collapse_step"]

RULE_NAME = "collapse-v2"
"""the name stored with results computed by ``classify`` (older results used the argmax-peak rule)"""
RULE = dict(frac=0.5, persist=None, min_peak=0.2, w=5, std_min_peak=0.05, min_len=10, tol=0.3)
"""the ledger's and the scorecard's settings of ``classify``: a 5-step trailing mean (as the earlier rule
smoothed), a fall to below half the running peak that lasts to the end of the run, and freezes of >= 10
steps"""
FLOOR_RULE_NAME = "collapse-floor-v1"
"""the name of ``floor_collapse_step``'s rule (collapse-v2 measured above the task's floor) in stored results"""


# ---- checks -----------------------------------------------------------------------------------------------
def _series(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim != 1:
        raise ValueError(f"{name} must be a 1-D series (one value per step), got shape {a.shape}")
    return a


def _same_length(**series) -> list:
    out = [_series(v, k) for k, v in series.items()]
    lengths = {k: len(v) for k, v in zip(series, out)}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"series lengths differ: {lengths}; every series needs one value per step")
    return out


def _check(frac: float, w: int, persist: Optional[int] = None, min_peak: float = 0.0) -> None:
    if not np.isfinite(min_peak):
        raise ValueError(f"min_peak must be a finite number, got {min_peak}")
    if not 0.0 < frac < 1.0:
        raise ValueError(f"frac must lie in (0, 1), got {frac}")
    if int(w) != w or w < 1:
        raise ValueError(f"w (smoothing window) must be an integer >= 1, got {w}")
    if persist is not None and (int(persist) != persist or persist < 1):
        raise ValueError(f"persist must be None (to the end of the run) or an integer >= 1, got {persist}")


def smooth(x, w: int = 1) -> np.ndarray:
    """Trailing ``w``-step mean over the finite values of each window (NaN where a window has none).

        m_t = mean{x_s : t - w < s <= t, x_s finite}

    Example: [1, 3, nan, 5], w 2 -> [1, 2, 3, 5].
    """
    x = _series(x, "x")
    if int(w) != w or w < 1:
        raise ValueError(f"w (smoothing window) must be an integer >= 1, got {w}")
    if not len(x):
        return x
    padded = np.concatenate([np.full(int(w) - 1, np.nan), x])                 # (N + w - 1,)
    windows = np.lib.stride_tricks.sliding_window_view(padded, int(w))        # (N, w): steps t - w + 1 .. t
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)                       # a window of NaN only: NaN
        return np.nanmean(windows, axis=1)


# ---- the collapse rule ------------------------------------------------------------------------------------
def collapse_step(mean, grad_norm, *, frac: float = 0.5, persist: Optional[int] = None, min_peak: float = 0.2,
                  w: int = 1) -> Optional[int]:
    """The first step t at which the run collapses, or None (the rule is in the module docstring).

    m = smooth(mean, w); P_t = max_{s <= t} m_s. Collapse at the first t with P_t >= min_peak,
    m_u < frac * P_t for u = t .. e (e: the run's last step, or t + persist - 1; a window that runs past
    the end does not count) and a finite grad_norm > 0 on some step from p (the last step with m_p = P_t)
    to e (m_p = P_t up to float rounding: a plateau's 5-step means differ in the last bit). A NaN mean never
    counts as below.

    Examples (w 1):
        mean [0, .4, .8, .3, .2, .2], grad_norm [1, 1, 1, 1, 0, 0] -> 3  (peak .8 at 2; .3 < .4 and stays)
        the same mean with grad_norm all 0 -> None                       (nothing learned its way down)
        mean [.9, .9, .2, .1, .6, 1, 1], grads 1, persist 2 -> 2          (a crash after a BC start; the later
                                                                          peak 1.0 does not hide it)
    """
    m_raw, g = _same_length(mean=mean, grad_norm=grad_norm)
    _check(frac, w, persist, min_peak)
    m = smooth(m_raw, w)                                                      # (N,)
    n = len(m)
    peak = np.fmax.accumulate(m) if n else m                                  # (N,) running peak, NaN-blind
    moved = np.isfinite(g) & (g > 0)                                          # (N,)
    with np.errstate(invalid="ignore"):
        candidates = np.flatnonzero((peak >= min_peak) & (m < frac * peak))
    for t in candidates:
        end = n if persist is None else t + int(persist)                      # window [t, end)
        if end > n:
            break                                                             # later t cannot fit either
        if not np.all(m[t:end] < frac * peak[t]):
            continue
        at_peak = np.abs(m[:t + 1] - peak[t]) <= 1e-9 * abs(peak[t])          # (t + 1,) float-rounding equal
        p = int(np.flatnonzero(at_peak)[-1])                                  # last step at the peak
        if moved[p:end].any():
            return int(t)
    return None


def std_drop_step(std, before: int, *, frac: float = 0.5, min_peak: float = 0.05, w: int = 1) -> Optional[int]:
    """The first step t <= ``before`` where the within-group reward std falls below ``frac`` x its running
    peak from step 0 (a peak >= ``min_peak``), or None: the std drop that precedes a mean collapse.

        s = smooth(std, w);  first t <= before with max_{u <= t} s_u >= min_peak and s_t < frac * max_{u <= t} s_u

    Example: std [.5, .5, .1, .1], before 3 -> 2; before 1 -> None.
    """
    s = _series(std, "std")
    _check(frac, w, min_peak=min_peak)
    if int(before) != before or not 0 <= before < len(s):
        raise ValueError(f"before must be a step index in [0, {len(s) - 1}], got {before}")
    s = smooth(s, w)[:int(before) + 1]                                        # (before + 1,)
    peak = np.fmax.accumulate(s)
    with np.errstate(invalid="ignore"):
        hit = np.flatnonzero((peak >= min_peak) & (s < frac * peak))
    return int(hit[0]) if hit.size else None


# ---- the freeze rule --------------------------------------------------------------------------------------
def freeze_span(grad_norm, mean, *, min_len: int = 10, tol: float = 0.3) -> Optional[tuple]:
    """(start, end) of the first freeze, steps start .. end - 1 (a slice), or None.

    A candidate is a maximal run of >= ``min_len`` (>= 2) steps whose grad_norm is 0 or not finite (no update);
    it is a freeze when the reward is held over it: the span's mean reward is > 0 and the means of its two
    halves differ by at most ``tol`` (see the module docstring for why halves, not the first value).

    Examples (min_len 4):
        grad_norm [1, 0, 0, 0, 0, 0], mean [.2, .75, .5, .75, .5, .75] -> (1, 6)   (noisy, held: .625 vs .667)
        the same with mean [.2, 1, 1, 0, 0, 0] -> None                              (fell on a zero gradient)
        the same with mean all 0 -> None                                            (silent at zero, not frozen)
    """
    g, m = _same_length(grad_norm=grad_norm, mean=mean)
    if int(min_len) != min_len or min_len < 2:
        raise ValueError(f"min_len must be an integer >= 2 (a span with two halves), got {min_len}")
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    still = ~(np.isfinite(g) & (g > 0))                                       # (N,) no gradient-driven update
    edges = np.diff(np.concatenate([[0], still.astype(int), [0]]))           # (N + 1,) +1 starts, -1 ends
    for start, end in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):
        if end - start < min_len:
            continue
        span = m[start:end]
        half = len(span) // 2
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)                   # an all-NaN half: NaN, not held
            level, first, second = np.nanmean(span), np.nanmean(span[:half]), np.nanmean(span[half:])
        if level > 0 and abs(second - first) <= tol:
            return int(start), int(end)
    return None


def classify(mean, std, grad_norm, *, frac: float = 0.5, persist: Optional[int] = None, min_peak: float = 0.2,
             w: int = 1, std_min_peak: float = 0.05, min_len: int = 10, tol: float = 0.3) -> dict:
    """Both rules on one run, as the ledger, the scorecard and notebook 02 read them.

    Returns {"collapsed", "t_collapse", "t_std_drop", "std_first", "frozen", "t_freeze", "freeze_len"}:
    ``t_collapse`` from ``collapse_step``; ``t_std_drop`` = ``std_drop_step(std, t_collapse)`` (same frac
    and w), None without a collapse; ``std_first`` = t_std_drop < t_collapse (None without a collapse);
    ``t_freeze`` / ``freeze_len`` the start and length of ``freeze_span`` (None / 0 without one). A run
    can both freeze and collapse (frozen for a while, then a fall with gradients).

    Example (w 1, min_len 3): mean [.8, .8, .8, .8, .1, .1], std [.4, .4, .1, .1, 0, 0],
    grad_norm [1, 1, 1, 1, 1, 1] -> collapsed at 4, std drop at 2 (std first), not frozen.
    """
    m, s, g = _same_length(mean=mean, std=std, grad_norm=grad_norm)
    tc = collapse_step(m, g, frac=frac, persist=persist, min_peak=min_peak, w=w)
    ts = None if tc is None else std_drop_step(s, tc, frac=frac, min_peak=std_min_peak, w=w)
    span = freeze_span(g, m, min_len=min_len, tol=tol)
    return {"collapsed": tc is not None, "t_collapse": tc, "t_std_drop": ts,
            "std_first": None if tc is None else ts is not None and ts < tc,
            "frozen": span is not None, "t_freeze": None if span is None else span[0],
            "freeze_len": 0 if span is None else span[1] - span[0]}


# ---- the collapse rule measured against the task's floor ----------------------------------------------------
def _floor(floor: float) -> float:
    if not np.isfinite(floor):
        raise ValueError(f"floor must be a finite success level (the scrambled-reasoning success), got {floor}")
    return float(floor)


def floor_normalized(success, floor: float, *, w: int = 1) -> np.ndarray:
    """Success measured from the task's floor against the running peak: (N,)

        n_t = (m_t - f) / (P_t - f),   m = smooth(success, w),  P_t = max_{s <= t} m_s

    NaN where P_t <= f (nothing learned above the floor yet) or m_t is NaN. Example (w 1): success
    [.5, 1, .75, .5], floor .5 -> [nan, 1, .5, 0].
    """
    f = _floor(floor)
    m = smooth(success, w)                                                    # (N,)
    peak = np.fmax.accumulate(m) if len(m) else m                             # (N,) running peak, NaN-blind
    gain = peak - f
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(gain > 0, (m - f) / np.where(gain > 0, gain, 1.0), np.nan)


def floor_collapse_step(success, grad_norm, floor: float, *, frac: float = 0.5, persist: Optional[int] = None,
                        min_gain: float = 0.2, w: int = 1) -> Optional[int]:
    """``collapse_step`` measured from the task's floor f: the first step t at which n_t = (m_t - f) / (P_t - f)
    falls below ``frac`` and stays there (to the end, or ``persist`` steps), with P_t - f >= ``min_gain`` (the
    run had learned above the floor) and a non-zero gradient in the fall; None otherwise. It is collapse_step on
    success - f (the running peak and the smoothing shift with it), so f = 0 gives the plain rule.

    Examples (w 1, grads 1): success [.9, .9, .5, .5, .5], floor .5 -> 2 (forgot: n = 0; the plain rule's line
    .45 is never crossed); floor 0 -> None; success [.5, .5, .5], floor .5 -> None (floor == peak: no gain).
    """
    f = _floor(floor)
    return collapse_step(_series(success, "success") - f, grad_norm, frac=frac, persist=persist, min_peak=min_gain,
                         w=w)
