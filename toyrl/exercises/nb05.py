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


@exercise("05.biased_turns")
def _biased_turns(fn):
    """An n-turn episode under last_k = K: the turns k > K have had history cut, so max(n - K - 1, 0) are biased."""
    for K in range(1, 5):
        for n in range(1, 11):
            want = max(n - K - 1, 0)
            got = fn(K, n)
            try:
                ok = float(got) == want
            except (TypeError, ValueError):
                ok = False
            if not ok:
                return False, (f"for K={K}, n={n} expected {want}, got {got!r}. Turn k sees k earlier turns; last_k "
                               "keeps K of them, so turns 0..K are exact and every later turn is biased (none in a "
                               "short episode).")
    return True, "turns K+1 .. n-1 are biased: max(n - K - 1, 0) of them."
