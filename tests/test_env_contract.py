"""The env contract (toyrl.rollout.contract, docs/your_env.md): every shipped env and the docs' example pass it,
a deliberately incomplete env gets one line per missing piece (Python and `toyrl check-env`), the doc lists every
piece and shows the example whole, the example trains, and GiGPO's anchor share is computed one way everywhere."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from toyrl.cli.commands import main
from toyrl.envs import ENVS, BatchedCore, mix64
from toyrl.rollout.contract import CONTRACT
from toyrl.segments import anchor_recurrence
from toyrl.testing import check_env
from toyrl.train import TrainConfig, train

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "keydoor.py"
DOC = ROOT / "docs" / "your_env.md"
INCOMPLETE = '''
import numpy as np
from toyrl.envs import BatchedCore

class HalfCore(BatchedCore):
    """Forgets obs_vocab_size, prompt_tokens, state_keys and info["success"]."""
    def __init__(self, num_envs, *, seed=None):
        super().__init__(num_envs, seed)
        self.n_actions, self.task_dim, self.max_turns = 2, 1, 3
    def sample_tasks(self, rng, n):
        return rng.integers(0, 3, (n, 1))
    def reset(self, tasks):
        self.state = self.episode_state(pos=np.zeros(self.num_envs, np.int64))
        return self.state["pos"]
    def step(self, actions):
        live = ~self.state["done"]
        self.state["pos"] = self.state["pos"] + live * (np.asarray(actions) == 1)
        truncated = self.end_turn(live, np.zeros(self.num_envs, bool))
        return self.state["pos"], np.zeros(self.num_envs), np.zeros(self.num_envs, bool), truncated, {}
    def obs_tokens(self, i=0):
        return [int(self.state["pos"][i])]
'''
MISSING = {"obs_vocab_size", "prompt_tokens", "state_keys", "success"}


@pytest.fixture(autouse=True)
def envs_restored():
    """The example registers keydoor in ENVS: each test leaves the registry as it found it (a test sharing this
    worker, such as the README's count of envs, must not see it)."""
    before = dict(ENVS)
    yield
    ENVS.clear()
    ENVS.update(before)


def load_example():
    spec = importlib.util.spec_from_file_location("keydoor", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", ["gridworld", "bandit_chain", "mock_search", "doors", "keydoor"])
def test_every_shipped_env_and_the_example_hold_the_contract(name):
    cls = load_example().KeyDoorCore if name == "keydoor" else ENVS[name][1]
    report = check_env(cls)
    assert report.ok, report.text()
    assert 0 < report.anchor["anchor_share"] <= 1 and report.lines[-1].startswith("anchor")
    assert report.text().endswith("verdict: the contract holds")


def test_an_incomplete_env_gets_one_line_per_missing_piece(tmp_path):
    (tmp_path / "half.py").write_text(INCOMPLETE)
    spec = importlib.util.spec_from_file_location("half", tmp_path / "half.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    report = check_env(mod.HalfCore)
    named = {re.match(r"\S+\s+([^:]+):", line).group(1) for line in report.missing}
    assert not report.ok and named == MISSING and len(report.missing) == len(MISSING)
    assert all("\n" not in line and line.startswith(("MISSING", "BROKEN")) for line in report.missing)
    assert any("info key" in line and "'success'" in line for line in report.missing)


def test_check_env_cli_exit_codes(tmp_path, capsys):
    (tmp_path / "half.py").write_text(INCOMPLETE)
    assert main(["check-env", f"{tmp_path / 'half.py'}:HalfCore"]) == 1
    out = capsys.readouterr().out
    assert sum(line.startswith("MISSING") for line in out.splitlines()) == len(MISSING)
    assert "verdict: 4 piece(s) missing or broken" in out
    assert main(["check-env", f"{EXAMPLE}:KeyDoorCore", "--env-kwargs", "rooms=3"]) == 0
    out = capsys.readouterr().out
    assert "verdict: the contract holds" in out and re.search(r"anchor\s+share 0\.\d\d", out)
    assert main(["check-env", f"{EXAMPLE}:NoSuchClass"]) == 2
    assert "has no 'NoSuchClass'" in capsys.readouterr().err


def test_a_key_that_differs_between_copies_is_broken_and_a_clocked_key_shares_no_anchor():
    """A key holding the copy's row differs between copies of one state: refused. A key holding the turn counter,
    with one rollout per task, never recurs within a group: the report says GiGPO is GRPO there."""
    base = load_example().KeyDoorCore

    class PerCopy(base):
        def state_keys(self):
            return mix64(super().state_keys(), np.arange(self.num_envs))

    class Clocked(base):                                                   # the turn counter in the key
        def state_keys(self):
            return mix64(super().state_keys(), self.state["turn"])

    report = check_env(PerCopy)
    assert [line.split(":")[0] for line in report.missing] == ["BROKEN  state_keys"]
    lone = check_env(Clocked, group_size=1)
    assert lone.ok and lone.anchor["anchor_share"] == 0 and "GiGPO equals GRPO here" in lone.lines[-1]
    assert check_env(Clocked, group_size=4).anchor["anchor_share"] > 0     # copies of one task meet at each turn


def test_the_doc_lists_every_piece_and_shows_the_example_whole():
    doc = DOC.read_text()
    for piece in CONTRACT:
        assert f"| `{piece.name}` |" in doc, piece.name
    block = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    assert block == EXAMPLE.read_text()
    core_doc = BatchedCore.__doc__
    for piece in CONTRACT:
        for word in piece.name.replace("/", " ").split():
            assert word.strip('"') in core_doc, word


def test_the_example_env_trains():
    """docs/your_env.md's KeyDoor learns with GiGPO: success over the last 10 of 30 steps well above the first 10."""
    torch.manual_seed(0)
    load_example()                                                          # registers keydoor
    log = train(TrainConfig(env="keydoor", env_kwargs={"rooms": 3}, estimator="gigpo", steps=30, prompts_per_step=4,
                            group_size=8, seed=0, progress=False))
    s = log.column("success_rate")
    assert s[-10:].mean() > max(0.25, 2 * s[:10].mean()), s.round(2)
    assert np.isfinite(log.column("anchor_share")).all()


def test_anchor_recurrence_hand_case_and_the_claims_probe():
    group = torch.tensor([0, 0])
    keys = torch.tensor([[1, 2], [1, 3]])
    r = anchor_recurrence(group, keys, torch.ones(2, 2, dtype=torch.bool))
    assert r == {"anchor_share": 0.5, "anchor_states_recur": pytest.approx(1 / 3), "anchor_group_mean": pytest.approx(4 / 3),
                 "anchor_group_max": 2}
    apart = anchor_recurrence(torch.tensor([0, 1]), keys, torch.ones(2, 2, dtype=torch.bool))
    assert apart["anchor_share"] == 0.0                                     # equal keys in two groups are two anchors
    none = anchor_recurrence(group, keys, torch.zeros(2, 2, dtype=torch.bool))
    assert none["anchor_share"] == 0.0 and none["anchor_group_max"] == 0
