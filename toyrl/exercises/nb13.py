"""Checkers of notebook 13 (credit that pays off: long horizons and farmable turn rewards)."""
from __future__ import annotations

import math

from . import exercise


@exercise("13.start_success")
def start_success(fn):
    """``fn(eps, L, A)``: the success of a clone that copies a teacher erring with probability eps (a uniform action
    out of A) on a task of L turns where every wrong move is fatal."""
    for eps, L, A in ((0.05, 16, 4), (0.05, 48, 4), (0.2, 10, 2), (0.0, 30, 4)):
        want = (1 - eps * (1 - 1 / A)) ** L
        got = float(fn(eps, L, A))
        if abs(got - want) > 1e-9:
            if abs(got - (1 - eps) ** L) < 1e-9:
                return False, ("a uniform draw out of A actions is the right one with probability 1/A: "
                               "what is the chance that a turn goes wrong?")
            return False, f"at eps={eps}, L={L}, A={A}: one turn is right with probability 1 - eps (1 - 1/A); L in a row?"
    return True, ("(1 - eps (1 - 1/A))^L: at 5% teacher noise that is 0.54 at 16 turns and 0.16 at 48. The longer "
                  "the horizon, the more decisions a single outcome has to credit.")


@exercise("13.grpo_contrast")
def grpo_contrast(answer):
    """The fatal turn's GRPO advantage minus the mean of its episode's earlier turns, in any failed episode."""
    if abs(float(answer)) < 1e-12:
        return True, ("0, always: GRPO gives each turn of an episode the episode's one advantage, so it cannot tell "
                      "the fatal move from the right moves before it. Per-turn credit is what can.")
    return False, "GRPO's advantage is (R_i - mean_g R) / std_g R for every turn k of episode i. Does it depend on k?"


@exercise("13.farm")
def farm(fn):
    """``fn(K, T, lure_first)``: the number of MT-GRPO turn signals an episode collects on a K-stage chain of T turns
    when it pulls a lure on every turn (lure_first=True) or every right arm in order and then stops (False)."""
    for K, T in ((8, 16), (4, 12), (3, 3)):
        for lure in (True, False):
            want = T if lure else min(K, T)
            got = fn(K, T, lure)
            if not isinstance(got, (int, float)) or math.isnan(got) or int(got) != want:
                return False, (f"K={K}, T={T}, lure_first={lure}: a lure reports 'found' on every pull and never "
                               "ends the episode; the chain ends once its K stages are passed")
    return True, ("a lure farmer collects T signals and never succeeds; the solver collects K and succeeds. A turn "
                  "reward that pays more for farming than for solving is optimized locally (Wei et al.).")
