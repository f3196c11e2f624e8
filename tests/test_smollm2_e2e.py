"""The real pretrained LLM end to end: fetch SmolLM2-135M-Instruct (``toyrl models fetch smollm2``), load it as
``--policy smollm2``, one behaviour-cloning step and one RL step on a tiny slice (1 task x 2 rollouts, 1 turn).

Slow (a one-time fetch of 93 MB and a 2-minute conversion; a step of a 135M model on CPU), so it runs only where
the model is already fetched or ``TOYRL_TEST_SMOLLM2=1`` asks for the fetch; otherwise it is skipped, saying why.
"""
import math
import os

import pytest

from toyrl.policies.zoo import is_fetched, model_dir

pytest.importorskip("transformers")

WANTED = os.environ.get("TOYRL_TEST_SMOLLM2") == "1"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not (WANTED or is_fetched("smollm2")),
    reason="SmolLM2 is not fetched (run `toyrl models fetch smollm2`, or set TOYRL_TEST_SMOLLM2=1 to fetch it here)")]


def test_fetch_load_and_one_rl_step():
    pytest.importorskip("gguf")
    from toyrl.lab.bench.smollm2 import SYSTEM, format_valid
    from toyrl.lab.models import fetch
    from toyrl.train import TrainConfig, Trainer
    said = []
    path = fetch("smollm2", say=said.append)
    assert path == model_dir("smollm2") and is_fetched("smollm2")
    assert said[-1].startswith("smollm2: ")                          # "ready at ..." or "already fetched at ..."
    tr = Trainer(TrainConfig(env="bandit_chain", policy="smollm2", system=SYSTEM, group_size=2, prompts_per_step=1,
                             max_turns=1, steps=1, lr=1e-5, progress=False))
    assert (tr.codec.tokenizer.eos_id, tr.codec.tokenizer.pad_id, tr.codec.tokenizer.bos_id) == (2, 2, None)
    assert tr.codec.template[0].startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>")
    loss = tr.behaviour_clone(1)[0]
    assert math.isfinite(loss) and loss > 0
    ro = tr.sample()
    assert ro.batch.B == 2 and 0.0 <= format_valid(ro) <= 1.0
    row = tr.step()
    assert row["tokens_generated"] > 0 and math.isfinite(row["grad_norm"])
