"""Lesson 9's light-reading probe: P(door | light) of a text policy on Doors, from teacher-forced reply log-probs."""
import math

import numpy as np
import pytest
import torch

from toyrl.envs import make_core
from toyrl.train import TrainConfig, Trainer
from toyrl.viz.small_llm import door_choices, light_reading, plot_door_choices


@pytest.fixture(scope="module")
def tinylm_doors():
    from toyrl.envs.doors import instruction
    tr = Trainer(TrainConfig(env="doors", env_kwargs={"rooms": 2, "colours": 3}, policy="tinylm",
                             system=instruction(3), reply_tokens=6, steps=1, progress=False))
    return tr


def test_light_reading_worked_examples():
    r = light_reading(np.eye(3))
    assert r["right"] == 1.0 and r["mi"] == pytest.approx(math.log(3)) and r["H"] == pytest.approx(math.log(3))
    r = light_reading(np.tile([1.0, 0.0, 0.0], (3, 1)))                   # always go[left]: a template
    assert r["right"] == pytest.approx(1 / 3) and r["mi"] == pytest.approx(0.0) and r["H"] == pytest.approx(0.0)
    r = light_reading(np.full((3, 3), 1 / 3))                             # ignores the light, every door alike
    assert r["right"] == pytest.approx(1 / 3) and r["mi"] == pytest.approx(0.0, abs=1e-12)
    assert r["H"] == pytest.approx(math.log(3))
    P = np.array([[0.5, 0.5], [0.0, 1.0]])                                # by hand: p(c,d) = P / 2, p(d) = (.25, .75)
    mi = (0.25 * math.log(0.25 / (0.5 * 0.25)) + 0.25 * math.log(0.25 / (0.5 * 0.75))
          + 0.5 * math.log(0.5 / (0.5 * 0.75)))
    assert light_reading(P)["mi"] == pytest.approx(mi) and light_reading(P)["right"] == pytest.approx(0.75)
    assert light_reading(P)["H"] == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))


def test_door_choices_is_each_reply_scored_alone(tinylm_doors):
    """The batched, padded matrix equals each (prompt, reply) scored on its own, normalized by hand."""
    tr = tinylm_doors
    P = door_choices(tr.policy, tr.codec, rooms=2, colours=3)
    assert P.shape == (3, 3) and np.allclose(P.sum(1), 1.0) and (P >= 0).all()
    core = make_core("doors", 1, rooms=2, colours=3)
    want = np.zeros((3, 3))
    for c in range(3):
        core.reset(np.full((1, 2), c, np.int64))
        prompt = tr.codec.prompt(core, 0)
        for d in range(3):
            reply = tr.codec.action_ids(core, d, 0)
            seq = torch.tensor([prompt + reply])
            with torch.no_grad():
                lp, _ = tr.policy.logprobs(seq, torch.ones_like(seq, dtype=torch.bool))
            want[c, d] = lp[0, len(prompt):].sum().item()
    want = np.exp(want - want.max(1, keepdims=True))
    assert np.allclose(P, want / want.sum(1, keepdims=True), atol=1e-5)
    assert np.array_equal(P, door_choices(tr.policy, tr.codec, rooms=2, colours=3))      # no sampling
    assert tr.policy.training                                                           # its mode is restored


def test_plot_door_choices_standard(tinylm_doors):
    from conftest import assert_figure_standard
    tr = tinylm_doors
    P = door_choices(tr.policy, tr.codec, rooms=2, colours=3)
    fig = plot_door_choices({"before RL": P, "after RL": np.eye(3)}, title="Doors 2 x 3, TinyLM: P(door | light)")
    assert_figure_standard(fig, "Doors 2 x 3")
    assert "right door 1.00" in fig.axes[1].get_title()


def test_the_lesson_run_starts_from_the_shipped_adapters():
    """Lesson 9's live run loads the shipped bf16 LoRA warm start over the fetched SmolLM2, which ignores the light."""
    from toyrl.policies.zoo import is_fetched
    if not is_fetched("smollm2"):
        pytest.skip("SmolLM2 is not fetched (toyrl models fetch smollm2)")
    from toyrl.train.warmstart import load_warmstart
    from toyrl.viz.small_llm import DOORS, quiet_transformers
    ck = load_warmstart("doors_smollm2")
    assert "opt_state" not in ck and all(v.dtype == torch.bfloat16 for v in ck["state_dict"].values())
    with quiet_transformers():
        tr = Trainer(TrainConfig(**DOORS, steps=1, progress=False))
    have = dict(tr.policy.named_parameters())
    assert set(ck["state_dict"]) == {k for k, p in have.items() if p.requires_grad}
    for k, v in ck["state_dict"].items():
        assert torch.equal(have[k].detach(), v.float()), k
    r = light_reading(door_choices(tr.policy, tr.codec, tr.core.K, tr.core.C))
    assert r["mi"] < 0.05                  # a format-only start: the door does not depend on the light
