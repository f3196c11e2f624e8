"""Checkers of notebook 13 (credit that pays off: long horizons and farmable turn rewards)."""
from __future__ import annotations

import math

from . import exercise


def half_noise(L: int = 48, A: int = 4) -> float:
    """The teacher noise eps at which a clone starts at success 1/2 on L fatal turns with A actions:
    (1 - eps (1 - 1/A))^L = 1/2  ->  eps = (1 - 2^(-1/L)) / (1 - 1/A). Example: L 48, A 4 -> 0.0191."""
    return (1 - 0.5 ** (1 / L)) / (1 - 1 / A)


@exercise("13.half_noise")
def half_noise_ex(answer):
    """The teacher noise eps at which the 48-turn snake's clone (A = 4 actions) would start at success 1/2."""
    want = half_noise(48, 4)
    got = float(answer)
    if abs(got - want) < 1e-4 or abs(got - 100 * want) < 1e-2:
        return True, (f"eps = {want:.4f}: under 2% noise already halves a 48-turn start. Solve "
                      "(1 - eps (1 - 1/A))^L = 1/2 for eps.")
    if abs(got - (1 - 0.5 ** (1 / 48))) < 1e-4:
        return False, "a random action is right with probability 1/A: only a share (1 - 1/A) of the noise is fatal."
    return False, "start from the key equation's (1 - eps (1 - 1/A))^L, set it to 1/2 and solve for eps."


@exercise("13.rloo_contrast")
def rloo_contrast(answer):
    """``turn_contrast(batch, ESTIMATORS["rloo"](batch))["contrast"]`` on the lesson's 7x7 snake batch: the fatal
    turn's RLOO advantage minus the mean over its episode's earlier turns, averaged over the failed episodes."""
    got = float(answer)
    if abs(got) < 1e-6:
        return True, ("0: RLOO, like GRPO, gives each turn of an episode the episode's one advantage (R_i minus the "
                      "mean of the others), so it cannot tell the fatal move from the right moves before it.")
    return False, "RLOO's advantage is R_i - mean_{j != i} R_j for every turn of episode i. Does it depend on the turn?"


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
