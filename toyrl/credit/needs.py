"""What a method needs besides rewards and group ids: the closed vocabulary its registry entry declares.

Every estimator (``register_estimator(..., needs=...)``), clipping scheme (``Scheme.needs``) and
filter (``Filter.needs``) names its extra inputs with the words below, so a trainer can provide
them by need instead of by method name, a config check can refuse a method an env cannot serve,
and a notebook can print what each method is built on:

    ESTIMATORS["archer"].needs        # ("double_critic",)
    NEEDS["double_critic"].doc        # what the input is ...
    NEEDS["double_critic"].provider   # ... and how toyrl.train.Trainer provides it

``env_method`` names the env-core method a need reads (envs whose core lacks it cannot provide the
need); ``built=False`` marks a need nothing in toyrl provides yet.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

__all__ = ["Need", "NEEDS", "check_needs"]


@dataclass(frozen=True)
class Need:
    doc: str
    """what the input is and where the method reads it (a keyword or a TurnBatch field), with its shape"""
    provider: str
    """how the Trainer provides it (the model it fits, or the record it reads)"""
    env_method: Optional[str] = None
    """the env-core method it reads; an env whose core lacks this method cannot provide the need"""
    built: bool = True
    """False: nothing in toyrl provides it yet (a config asking for it is refused)"""
    short: str = ""
    """a few words for one-line refusals (default: the need's name)"""
    logs: tuple = ()
    """the run-log columns the Trainer writes when it provides this need (its model's loss and error)"""


NEEDS: dict[str, Need] = {
    "values": Need("a turn value critic V(s_k), TurnBatch.values (B, H)",
                   "TurnCritic on the policy's detached hidden state before each turn, regressed on Monte Carlo "
                   "returns (value_loss)", logs=("critic_loss", "value_error")),
    "token_values": Need("the value critic read at every token, keyword token_values (B, T)",
                         "the same TurnCritic applied to every token's hidden state"),
    "double_critic": Need("ArCHer's utterance-level double critic, keywords q and v (B, H, 2)",
                          "DoubleCritic on (state, action) hidden features with a target network, archer_losses, "
                          "soft_update tau 0.1", logs=("archer_q_loss", "archer_v_loss", "archer_error")),
    "privileged_critic": Need("SWEET-RL's turn critic that sees privileged reference information, keyword "
                              "critic_adv (B, H)",
                              "TurnCritic on (state, action, reference-solution) features, sweet_bt_loss over "
                              "same-group pairs", env_method="privileged",
                              short="privileged reference information", logs=("sweet_loss", "sweet_pair_acc")),
    "progress": Need("SPA-RL's per-turn progress c_k, keyword progress (B, H)",
                     "TurnCritic on (state, action) features trained with progress_loss (sum_k c_k ~= R) at "
                     "critic_lr * 0.1",
                     logs=("progress_loss", "progress_error")),
    "info_gain": Need("per-turn information gain about the ground-truth answer, TurnBatch.info_gain (B, H) "
                      "(clip schemes: its turn-group z-score, keyword z)",
                      "the policy's probability of the answer after the turn minus before it (no gradient)",
                      env_method="answer_action", short="a ground-truth answer to measure each turn's information gain",
                      logs=("info_gain_abs", "answer_prob")),
    "greedy_baseline": Need("ReMax's greedy-episode reward of each task, keyword baseline_reward (B,)",
                            "one greedy rollout per task"),
    "node": Need("tree node ids, TurnBatch.node (B, H), shared over common prefixes",
                 "every rollout records them; rollout='tree' (or arpo / patr) makes siblings share prefixes"),
    "entropy": Need("the policy's entropy at each sampled token, TurnBatch.entropy (B, T)",
                    "every rollout records it"),
    "rollout_logp": Need("log-probs of the rollout engine that sampled the tokens, TurnBatch.rollout_logp (B, T)",
                         "every rollout records them: the engine's own (TrainConfig.engine; with the exact engine the "
                         "trainer's, so every correction is then the identity)",
                         short="log-probs from the rollout engine"),
}
"""need -> what it is and how it is provided"""


def check_needs(needs: Iterable[str], owner: str) -> tuple:
    """``needs`` as a tuple, or a ValueError naming ``owner`` and the first word not in ``NEEDS``.

    Example: check_needs(["values"], "gae") -> ("values",); check_needs(["q"], "x") raises.
    """
    if isinstance(needs, str):
        raise ValueError(f"{owner}: needs must be a sequence of names of NEEDS, got the string {needs!r}")
    out = tuple(needs)
    for n in out:
        if n not in NEEDS:
            raise ValueError(f"{owner}: unknown need {n!r}; valid: {', '.join(NEEDS)}")
    return out
