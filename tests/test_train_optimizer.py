"""The optimizer around the RL update: the update norm beside the gradient norm, AdamW's momentum
moving a policy whose gradient is exactly zero and the ``skip_zero_adv`` switch that stops it, RL continuing the
behaviour-cloning AdamW (``bc_optimizer``) and the linear lr warmup (``lr_warmup``, ``warmup_lr``)."""
import copy
from dataclasses import replace

import pytest
import torch

from toyrl.train import TrainConfig, Trainer
from toyrl.train.trainer import update_norm, warmup_lr

CHAIN = dict(env="bandit_chain", env_kwargs={"layout_seed": 0}, prompts_per_step=2, group_size=4, progress=False)
"""a tiny bandit-chain run: 2 groups of 4, one optimizer update per step"""
pytestmark = pytest.mark.filterwarnings("ignore:zero reward variance")


def weights(tr: Trainer) -> list:
    return [p.detach().clone() for p in tr.policy.parameters()]


def same(a: list, b: list) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


def signal_then_silence(**kw):
    """A trainer's step 0 on sampled rollouts with a non-zero advantage somewhere, then step 1 with greedy
    rollouts: every group's episodes are the same, so every group is silent and every advantage is exactly 0.
    Returns (trainer, row 0, weights before step 1, row 1). The first seed whose step 0 has signal is used."""
    for seed in range(3, 12):
        tr = Trainer(TrainConfig(seed=seed, steps=2, **CHAIN, **kw))
        row0 = tr.step()
        if row0["adv_abs_mean"] > 0:
            break
    else:
        raise AssertionError("no seed in 3-11 gave a step 0 with a non-zero advantage")
    tr.sampling = replace(tr.sampling, greedy=True)                  # a deterministic policy: silent groups
    before = weights(tr)
    return tr, row0, before, tr.step()


# ---- the pure functions ---------------------------------------------------------------------------------------
def test_update_norm_by_hand():
    before, after = [torch.tensor([0., 0.]), torch.tensor([1.])], [torch.tensor([3., 0.]), torch.tensor([5.])]
    assert update_norm(before, after) == 5.0
    assert update_norm([torch.ones(2, 3)], [torch.ones(2, 3)]) == 0.0 and update_norm([], []) == 0.0
    with pytest.raises(ValueError, match="before and after must hold as many tensors, got 1 and 0"):
        update_norm([torch.zeros(1)], [])
    with pytest.raises(ValueError, match=r"before\[0\] and after\[0\] must have one shape"):
        update_norm([torch.zeros(2)], [torch.zeros(3)])


def test_warmup_lr_examples_and_errors():
    assert [warmup_lr(k, 1e-3, 4) for k in range(6)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    assert warmup_lr(0, 3e-3, 0) == 3e-3 and warmup_lr(0, 3e-3, 1) == 3e-3
    for bad, message in [(dict(step=-1), "step must be an integer >= 0, got -1"),
                         (dict(step=1.5), "step must be an integer >= 0"),
                         (dict(warmup=-2), "warmup must be an integer >= 0, got -2"),
                         (dict(warmup=True), "warmup must be an integer >= 0"),
                         (dict(lr=0.0), "lr must be a number > 0")]:
        with pytest.raises(ValueError, match=message):
            warmup_lr(**{"step": 0, "lr": 1e-3, "warmup": 4, **bad})


# ---- the zero-gradient trap through the real Trainer --------------------------------------------------------
def test_momentum_moves_a_zero_gradient_policy_unless_the_step_is_skipped():
    """Without the switch, a step whose advantages (and so gradient) are exactly zero still moves the weights:
    AdamW's first moment from step 0. With it, that step takes no update; a step with signal is untouched."""
    off, off0, off_before, off1 = signal_then_silence()
    on, on0, on_before, on1 = signal_then_silence(skip_zero_adv=True)
    timing = lambda r: {k: v for k, v in r.items() if not k.startswith("time_")}   # noqa: E731
    assert timing(on0) == timing(off0)                               # a step with signal: identical rows
    assert off0["update_norm"] > 0 and off0["update_norm_mean"] == off0["update_norm"] and off0["skipped_update"] == 0
    keys = list(off0)                                        # new keys after the old ones; only the engine's later
    i = keys.index("update_norm")
    assert keys[i:i + 3] == ["update_norm", "update_norm_mean", "skipped_update"]
    assert keys[i + 3:] and all(k.startswith("engine_") for k in keys[i + 3:])   # the engine columns follow them
    for r in (off1, on1):
        assert r["adv_abs_mean"] == 0.0 and r["zero_var_frac"] == 1.0 and r["grad_norm"] == 0.0
    assert off1["skipped_update"] == 0 and off1["update_norm"] > 0.01            # the drift: measured 0.24 (seed 3)
    assert not same(off_before, weights(off)) and off.version == 2
    assert on1["skipped_update"] == 1 and on1["update_norm"] == 0.0
    assert same(on_before, weights(on)) and on.version == 1


def test_skip_means_skip_with_an_entropy_bonus():
    """With entropy_coef > 0 the all-zero-advantage step has a gradient (the bonus), and still takes no update."""
    tr, _, before, row = signal_then_silence(skip_zero_adv=True, entropy_coef=0.05)
    assert row["adv_abs_mean"] == 0.0 and row["grad_norm"] > 0
    assert row["skipped_update"] == 1 and row["update_norm"] == 0.0 and same(before, weights(tr))


# ---- RL after behaviour cloning: continue BC's AdamW, warm the lr up -----------------------------------------
def test_continue_keeps_the_bc_optimizer_and_fresh_does_not():
    base = dict(CHAIN, bc_steps=2, bc_lr=1e-3, lr=3e-3, steps=0)
    fresh = Trainer(TrainConfig(**base))
    fresh.run()
    assert len(fresh.opt.state) == 0 and fresh.opt.param_groups[0]["lr"] == 3e-3     # RL step 0: no moments
    cont = Trainer(TrainConfig(bc_optimizer="continue", **base))
    cont.run()
    state = [cont.opt.state[p] for p in cont.policy.parameters()]
    assert all(float(s["step"]) == 2 for s in state)                 # BC's two updates
    assert any(bool((s["exp_avg"] != 0).any()) for s in state) and cont.opt.param_groups[0]["lr"] == 3e-3
    cont.step()                                                      # RL goes on counting from BC's moments
    assert all(float(cont.opt.state[p]["step"]) == 3 for p in cont.policy.parameters())


def test_lr_warmup_counts_optimizer_updates():
    tr = Trainer(TrainConfig(seed=3, steps=2, lr=3e-3, lr_warmup=4, **CHAIN))
    tr.run()                                                         # 2 steps of 1 update: updates 0 and 1
    assert tr.version == 2 and tr.opt.param_groups[0]["lr"] == pytest.approx(warmup_lr(1, 3e-3, 4)) == 1.5e-3
    two = Trainer(TrainConfig(seed=3, steps=1, lr=3e-3, lr_warmup=4, ppo_epochs=2, **CHAIN))
    two.run()                                                        # 1 step of 2 updates
    assert two.version == 2 and two.opt.param_groups[0]["lr"] == pytest.approx(1.5e-3)


@pytest.mark.parametrize("kw,message", [
    (dict(bc_optimizer="adam"), "bc_optimizer must be one of fresh, continue, got 'adam'"),
    (dict(bc_optimizer="continue"), "bc_optimizer='continue' needs bc_steps > 0"),
    (dict(bc_optimizer="continue", bc_steps=0), "bc_optimizer='continue' needs bc_steps > 0"),
    (dict(lr_warmup=-1), r"lr_warmup must be an integer in \[0, 1e7\], got -1"),
    (dict(lr_warmup=2.5), "lr_warmup must be an integer"),
    (dict(skip_zero_adv="yes"), "skip_zero_adv must be true or false, got 'yes'"),
])
def test_validation_names_the_field(kw, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        TrainConfig(**kw).validate()
    TrainConfig(bc_optimizer="continue", bc_steps=1, lr_warmup=5, skip_zero_adv=True).validate()


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_step_and_measure_equals_the_snapshot_norm(wd, fused):
    """step_and_measure's norm is the distance between the weights before and after AdamW's step, for the
    per-tensor loop and the fused kernel; the step itself is AdamW's own."""
    from toyrl.train.optim import step_and_measure
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    twin = copy.deepcopy(net)
    a, b = (torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=wd, fused=fused) for m in (net, twin))
    for k in range(4):
        x = torch.randn(16, 5)
        for m, o in ((net, a), (twin, b)):
            o.zero_grad()
            (m(x).pow(2).mean() * (0.0 if k == 2 else 1.0)).backward()     # a zero gradient: momentum still moves
        before = [p.detach().clone() for p in twin.parameters()]
        b.step()
        want = update_norm(before, list(twin.parameters()))
        got = step_and_measure(a)
        assert got == pytest.approx(want, rel=1e-4) and got > 0
        for p, q in zip(net.parameters(), twin.parameters()):
            assert torch.equal(p, q)                                     # the step itself is AdamW's own


def test_adamw_fuses_where_it_can():
    """adamw: the fused kernel on request (CPU has one in this torch), the per-tensor loop otherwise; the hf
    trainer and behaviour cloning fuse, the toy trainer does not."""
    from toyrl.train.optim import adamw
    w = torch.nn.Parameter(torch.zeros(3))
    assert adamw([w], 1e-3, fused=True).defaults["fused"] is True
    assert not adamw([w], 1e-3).defaults["fused"] and adamw([w], 1e-3).defaults["weight_decay"] == 0.0
    assert not Trainer(TrainConfig(env="bandit_chain", steps=1)).opt.defaults["fused"]
    from toyrl.train.defaults import fused_adamw
    assert fused_adamw(TrainConfig(policy="smollm2")) and not fused_adamw(TrainConfig(policy="tiny"))


def test_step_and_measure_measures_any_optimizer():
    from toyrl.train.optim import step_and_measure
    w = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([w], lr=0.5)
    w.grad = torch.tensor([-6.0, -8.0])
    assert step_and_measure(opt) == pytest.approx(5.0)
