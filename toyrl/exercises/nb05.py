"""Exercises of notebook 5 (context mismatch)."""
from __future__ import annotations

from . import exercise


@exercise("05.last_clean_turn")
def _last_clean(fn):
    for K in range(1, 6):
        if int(fn(K)) != K:
            return False, ("at turn index k the history holds k earlier turns; last_k keeps the last K of them, "
                           "so nothing is cut while k <= K.")
    return True, "with last_k = K the turns 0..K see the full history, so their flat ratio is exact."


@exercise("05.which_recompute")
def _which(ans):
    if str(ans).strip().lower() == "matched":
        return True, "matched recompute reads the stored rollout contexts, so pi_theta = pi_old gives ratio 1."
    return False, "which recompute mode conditions on exactly the context the policy saw at rollout?"
