"""toyrl -> TRL: grpo_config builds a real GRPOConfig, refuses what TRL cannot express, and toyrl's losses
equal TRL GRPOTrainer's ``_compute_loss`` for every loss type on the same completions."""
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from toyrl.objectives import policy_loss
from toyrl.port.trl import grpo_config
from toyrl.train import TrainConfig

try:
    import trl
    from trl import GRPOConfig, GRPOTrainer
    REASON = ""
except Exception as e:  # TRL (or accelerate / transformers) missing
    trl, REASON = None, f"TRL is not importable here ({type(e).__name__}: {e}); pip install trl accelerate"
needs_trl = pytest.mark.skipif(trl is None, reason=REASON or "TRL missing")


def build(**kw):
    return GRPOConfig(output_dir="/tmp/toyrl_trl_test", report_to=[], use_cpu=True, bf16=False, **kw)


def test_mapping_hand_checked():
    kw = grpo_config(TrainConfig(clip="clip_higher", agg="token-mean", kl="k3", kl_coef=0.01, group_size=6))
    assert (kw["loss_type"], kw["epsilon"], kw["epsilon_high"], kw["beta"], kw["num_generations"]) == \
        ("dapo", 0.2, 0.28, 0.01, 6)
    assert kw["scale_rewards"] == "group" and kw["importance_sampling_level"] == "token"
    gspo = grpo_config(TrainConfig(clip="gspo"))
    assert (gspo["loss_type"], gspo["importance_sampling_level"], gspo["epsilon"]) == ("grpo", "sequence", 3e-4)
    assert grpo_config(TrainConfig(clip="cispo"))["epsilon_high"] == pytest.approx(1.28)
    assert grpo_config(TrainConfig(estimator="dr_grpo", clip="dual_clip"))["delta"] == 3.0
    assert grpo_config(TrainConfig(estimator="dr_grpo"))["scale_rewards"] == "none"
    assert grpo_config(TrainConfig(clip="vespo"))["vespo_k_neg"] == 3.0


def test_what_trl_cannot_express_is_named():
    with pytest.raises(ValueError) as e:
        grpo_config(TrainConfig(estimator="gigpo", clip="turn_ppo", filters=["starpo_s"]))
    msg = str(e.value)
    assert "gigpo" in msg and "ratio='turn'" in msg and "starpo_s" in msg
    with pytest.raises(ValueError, match="agg='token-sum'"):
        grpo_config(TrainConfig(agg="token-sum"))
    with pytest.raises(ValueError, match="no lower bound"):
        grpo_config(TrainConfig(clip="cispo", clip_kwargs={"eps_low": 0.2}))


@needs_trl
@pytest.mark.parametrize("cfg", [TrainConfig(), TrainConfig(clip="gspo"), TrainConfig(clip="sapo"),
                                 TrainConfig(clip="luspo"), TrainConfig(clip="vespo"), TrainConfig(clip="cispo"),
                                 TrainConfig(estimator="dr_grpo", clip="dual_clip", agg="seq-mean-token-sum-norm")])
def test_grpo_config_builds(cfg):
    kw = grpo_config(cfg)
    args = build(**kw)
    for k, v in kw.items():
        assert getattr(args, k) == v, k


# ---- loss parity with TRL's own _compute_loss -----------------------------------------------
def trl_loss(loss_type, logp, old, adv, mask, kw):
    """TRL GRPOTrainer._compute_loss on given per-token log-probs (its model forward stubbed out)."""
    B, T = logp.shape
    args = build(loss_type=loss_type, max_completion_length=T, **kw)
    acc = SimpleNamespace(num_processes=1, gather=lambda x: x, gather_for_metrics=lambda x: x,
                          reduce=lambda x, reduction="sum": x, sync_gradients=True)
    fake = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
        importance_sampling_level=args.importance_sampling_level, beta=0.0, args=args, loss_type=loss_type,
        epsilon_low=args.epsilon, epsilon_high=args.epsilon_high or args.epsilon, use_vllm=False,
        model=SimpleNamespace(training=True), current_gradient_accumulation_steps=1, accelerator=acc,
        _entropy_bonus_enabled=False, _metrics=defaultdict(lambda: defaultdict(list)), max_completion_length=T,
        get_gamma_weights=GRPOTrainer.get_gamma_weights, get_off_policy_mask=None)
    inputs = {"prompt_ids": torch.zeros(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1),
              "completion_ids": torch.zeros(B, T, dtype=torch.long), "completion_mask": mask, "advantages": adv,
              "old_per_token_logps": old, "num_items_in_batch": mask.sum()}
    return GRPOTrainer._compute_loss(fake, None, inputs)


def completions(seed, B=5, T=7, scale=0.4):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(T)[None, :] < torch.randint(1, T + 1, (B,), generator=g)[:, None]).float()
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    logp = (old + scale * torch.randn(B, T, generator=g, dtype=torch.float64)).requires_grad_()
    return logp, old, torch.randn(B, generator=g, dtype=torch.float64), mask


@needs_trl
@pytest.mark.parametrize("cfg", [TrainConfig(), TrainConfig(agg="seq-mean-token-mean"), TrainConfig(clip="gspo"),
                                 TrainConfig(clip="luspo"), TrainConfig(clip="sapo"), TrainConfig(clip="cispo"),
                                 TrainConfig(clip="vespo"), TrainConfig(clip="clip_higher", agg="seq-mean-token-sum"),
                                 TrainConfig(clip="dual_clip", agg="seq-mean-token-sum-norm")])
def test_toyrl_loss_equals_trl_compute_loss(cfg):
    kw = {k: v for k, v in grpo_config(cfg).items() if k in ("epsilon", "epsilon_high", "delta", "importance_sampling_level")
          or k.startswith(("sapo_", "vespo_"))}
    for seed, scale in ((0, 0.1), (1, 0.5), (2, 1.5)):
        logp, old, adv, mask = completions(seed, scale=scale)
        ref = trl_loss(grpo_config(cfg)["loss_type"], logp, old, adv, mask, kw)
        x = logp.detach().clone().requires_grad_()
        turn = torch.zeros_like(mask, dtype=torch.long)
        ours, _ = policy_loss(x, old, adv[:, None].expand_as(mask), mask.bool(), turn, clip=cfg.clip, ratio=cfg.ratio,
                              agg=cfg.agg, adv_level="token", log_ratio_clamp=(-1e9, 1e9), **cfg.clip_kwargs)
        assert torch.allclose(ours, ref, atol=1e-10), (cfg.clip, seed, float(ours), float(ref))
        g1, g2 = torch.autograd.grad(ours, x)[0], torch.autograd.grad(ref, logp)[0]
        assert torch.allclose(g1, g2, atol=1e-10), (cfg.clip, seed)
