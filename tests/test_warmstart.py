"""Warm starts: the BC recipe per lesson task, the checkpoint, init= in TrainConfig, the CLI."""
import numpy as np
import pytest
import torch

from toyrl.cli import main
from toyrl.cli.results import WARMSTART_NAMES
from toyrl.train import TrainConfig
from toyrl.train.trainer import Trainer
from toyrl.lab.warmstart import make_warmstart, reasoning_value
from toyrl.train.warmstart import (WARMSTARTS, check_matches, load_warmstart, match_fields, warmstart_bytes,
                                   warmstart_path)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    ck = make_warmstart("tmaze", bc_steps=3, seed=1, episodes=8)
    path = tmp_path_factory.mktemp("ws") / "tmaze.pt"
    path.write_bytes(warmstart_bytes(ck))
    return ck, path


def test_names_agree_and_shipped_files_exist():
    assert tuple(WARMSTARTS) == WARMSTART_NAMES
    for name in WARMSTARTS:
        assert warmstart_path(name).is_file(), f"make it with: toyrl warmstart {name} --update-shipped"


def test_checkpoint_holds_weights_optimizer_and_reasoning(tiny):
    ck, _ = tiny
    assert len(ck["bc_losses"]) == 3 and ck["settings"]["bc_reasoning"]
    assert ck["opt_state"]["state"] and all(s["step"] == 3 for s in ck["opt_state"]["state"].values())
    r = ck["reasoning"]
    assert 0 <= r["scrambled"] <= 1 and 0 <= r["intact"] <= 1


def rl_config(path, **kw):
    return TrainConfig(**match_fields("tmaze"), init=str(path), prompts_per_step=2, group_size=2, steps=1,
                       progress=False, **kw)


def test_init_loads_weights_and_optimizer(tiny):
    ck, path = tiny
    tr = Trainer(rl_config(path, bc_optimizer="continue", lr=1e-3))
    for k, v in tr.policy.state_dict().items():
        assert torch.equal(v, ck["state_dict"][k])
    assert tr.opt.param_groups[0]["lr"] == 1e-3 and len(tr.opt.state) > 0
    fresh = Trainer(rl_config(path))
    assert len(fresh.opt.state) == 0                                   # fresh: the weights only
    fresh.step()


def test_init_errors(tiny, tmp_path):
    ck, path = tiny
    with pytest.raises(ValueError, match="init must name"):
        rl_config(tmp_path / "nope.pt").validate()
    with pytest.raises(ValueError, match="two warm starts"):
        rl_config(path, bc_steps=3).validate()
    with pytest.raises(ValueError, match="think_max=3"):
        check_matches(ck, TrainConfig(**{**{k: v for k, v in WARMSTARTS["tmaze"].items()}, "think_max": 3}))
    with pytest.raises(ValueError, match="name must be one of"):
        make_warmstart("maze")
    with pytest.raises(ValueError, match="init: no warm-start checkpoint"):
        load_warmstart(tmp_path / "missing.pt")


def test_reasoning_value_bad_input(tiny):
    cfg = TrainConfig(**WARMSTARTS["tmaze"])
    with pytest.raises(ValueError, match="episodes"):
        reasoning_value(None, None, cfg, episodes=0)


def test_cli_writes_checkpoint(tmp_path, capsys):
    assert main(["warmstart", "plan_chain", "--bc-steps", "2", "--out-dir", str(tmp_path)]) == 0
    ck = load_warmstart(tmp_path / "plan_chain.pt")
    assert ck["name"] == "plan_chain" and len(ck["bc_losses"]) == 2
    assert "with its reasoning" in capsys.readouterr().out
    assert main(["warmstart", "maze", "--out-dir", str(tmp_path)]) == 2


@pytest.mark.filterwarnings("ignore:zero reward variance")
def test_a_lora_warm_start_keeps_the_adapters_only(tmp_path):
    """An hf policy with LoRA: the checkpoint holds exactly the trainable parameters, and init= loads them over the
    fetched base (whose weights stay the model's own)."""
    pytest.importorskip("peft")
    from conftest import make_local_model
    from toyrl.train.warmstart import apply_warmstart, trained_state
    path = "hf:" + make_local_model(tmp_path / "llama", "llama", chat=True)
    fields = dict(env="doors", env_kwargs={"rooms": 2, "colours": 2}, policy=path, system="Reply go[left].",
                  reply_tokens=4, lora_r=4, context="full")
    tr = Trainer(TrainConfig(**fields, prompts_per_step=1, group_size=2, steps=1, progress=False))
    with torch.no_grad():
        for name, p in tr.policy.named_parameters():
            if p.requires_grad:
                p.add_(0.01)                                   # adapters that differ from a fresh LoRA
    ck = {"name": "mine", "settings": fields, "state_dict": trained_state(tr.policy)}
    trains = {k for k, p in tr.policy.named_parameters() if p.requires_grad}
    assert set(ck["state_dict"]) == trains and all("lora" in k for k in trains)
    file = tmp_path / "mine.pt"
    file.write_bytes(warmstart_bytes(ck))
    again = Trainer(TrainConfig(**fields, init=str(file), prompts_per_step=1, group_size=2, steps=1, progress=False))
    for k, v in again.policy.state_dict().items():
        assert torch.equal(v, tr.policy.state_dict()[k]), k          # adapters loaded, base the same model
    again.step()
    half = {"name": "half", "settings": fields, "state_dict": dict(list(ck["state_dict"].items())[:2])}
    with pytest.raises(ValueError, match="neither the whole policy nor exactly its trainable parameters"):
        apply_warmstart(again, half)
    toy = Trainer(TrainConfig(env="doors", policy="tinylm", system="x", reply_tokens=4, steps=1, progress=False))
    assert set(trained_state(toy.policy)) == set(toy.policy.state_dict())      # no frozen part: the whole state
