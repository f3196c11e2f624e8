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


def lesson_contrast(name: str = "rloo") -> dict:
    """``turn_contrast`` of estimator ``name`` on the lesson's batch: 8 tasks x 8 rollouts of the 7x7 snake from its
    warm start, seed 0 (``horizon_config(7, steps=0, seed=0)``)."""
    from ..credit import ESTIMATORS
    from ..train import Trainer
    from ..viz.horizon import horizon_config, turn_contrast
    batch = Trainer(horizon_config(7, steps=0, seed=0)).sample().batch
    return turn_contrast(batch, ESTIMATORS[name](batch))


@exercise("13.rloo_contrast")
def rloo_contrast(answer):
    """What ``turn_contrast(batch, ESTIMATORS["rloo"](batch))`` returns on the lesson's 7x7 snake batch (the whole
    dict): per failed episode that fell, the fatal turn's RLOO advantage minus the mean over its earlier turns, and
    their mean. A typed number is refused: the check needs the computation on that batch."""
    if not isinstance(answer, dict) or not {"episodes", "contrast", "per_episode"} <= set(answer):
        return False, ("pass the whole result of the call, a dict: turn_contrast(batch, ESTIMATORS['rloo'](batch)); "
                       "predict its contrast first")
    want = lesson_contrast("rloo")
    if answer["episodes"] != want["episodes"] or len(answer["per_episode"]) != want["episodes"]:
        return False, (f"computed on another batch: the lesson's (snake 7x7, seed 0) has {want['episodes']} failed "
                       "episodes that ended in a fall")
    if all(abs(float(v)) < 1e-6 for v in answer["per_episode"]) and abs(float(answer["contrast"])) < 1e-6:
        return True, ("0 on every episode: RLOO, like GRPO, gives each turn of an episode the episode's one advantage "
                      "(R_i minus the mean of the others), so it cannot tell the fatal move from the right moves "
                      "before it.")
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
