"""Every registered estimator as plain Python loops: the textbook form the vectorized code must equal.

    from toyrl.credit import ESTIMATORS, REFERENCE
    torch.testing.assert_close(ESTIMATORS["gigpo"](batch), REFERENCE["gigpo"](batch))

Each reference takes the same inputs as its registered callable (a ``TurnBatch`` and the same keyword
hyperparameters with the same defaults) and returns the same shape: (B, H) for level "turn", (B, T)
for level "token". The loops run over rollouts, turns and tokens on Python floats (double precision),
the way the seed article writes GiGPO; they are slow (seconds for 10^5 turns) and meant to be read.

One module per family, as in ``toyrl.credit``: ``outcome`` (outcome baselines and GAE), ``multiturn``
(GiGPO, MT-GRPO, Tree-GRPO, RTPO, SPA, EMPG, A2TGPO, ArCHer, SWEET), ``peers`` (GDPO, OTB); ``base`` holds
the registry, its decorator and the list helpers they share.
"""
from . import multiturn, outcome, peers  # noqa: F401  (they file their references on import)
from .base import REFERENCE, source, to_go
from .outcome import gae_row

__all__ = ["REFERENCE", "source", "gae_row", "to_go"]
