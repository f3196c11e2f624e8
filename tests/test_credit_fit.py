"""The one-step fits of the learned credit models and their features, by hand (toyrl.credit.fit, credit_models)."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from toyrl.credit import NEEDS, check_needs, register_estimator
from toyrl.credit.critics import DoubleCritic
from toyrl.credit.fit import (archer_fit, group_center, info_gain, pair_accuracy, progress_fit, reference_features,
                              sweet_fit, turn_action_features, value_fit)
from toyrl.train.credit_models import answer_probs, prefix_ends
from toyrl.filters import Filter
from toyrl.objectives import Scheme, ppo
from toyrl.codecs.toy import ToyCodec


class Const(nn.Module):
    """A critic with one parameter c: every turn scores c."""

    def __init__(self, c: float):
        super().__init__()
        self.c = nn.Parameter(torch.tensor(c))

    def forward(self, x):
        return self.c.expand(x.shape[:-1])


def sgd(m, lr=0.1):
    return torch.optim.SGD(m.parameters(), lr=lr)


def test_turn_action_features_by_hand():
    hid = torch.tensor([[[1.0], [3.0], [5.0]]])
    pm = torch.tensor([[True, True, False]])
    out = turn_action_features(hid, pm, torch.tensor([[0, 0, 1]]), 2)
    assert out.tolist() == [[[2.0], [0.0]]]                     # turn 1 has no policy token
    hid2 = torch.arange(8.0).reshape(1, 4, 2)                   # padding (turn -1) is never counted
    out2 = turn_action_features(hid2, torch.tensor([[True, False, True, False]]), torch.tensor([[0, 0, 1, -1]]), 2)
    assert out2.tolist() == [[[0.0, 1.0], [4.0, 5.0]]]
    with pytest.raises(ValueError, match="policy_mask"):
        turn_action_features(hid, torch.tensor([[1, 1, 0]]), torch.tensor([[0, 0, 1]]), 2)


def test_reference_features_by_hand():
    assert reference_features([[0, 2], [1]], 3).tolist() == [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    with pytest.raises(ValueError, match="outside"):
        reference_features([[3]], 3)


def test_value_fit_by_hand():
    m = Const(0.0)
    values, loss = value_fit(m, sgd(m), torch.zeros(1, 2, 4), torch.tensor([[1.0, 1.0]]),
                             torch.ones(1, 2, dtype=torch.bool))
    assert values.tolist() == [[0.0, 0.0]] and loss == pytest.approx(0.5)   # 0.5 * mean (0 - 1)^2
    assert m.c.item() == pytest.approx(0.1)                      # dL/dc = mean(c - R) = -1, lr 0.1


def test_progress_fit_by_hand():
    m = Const(0.25)
    c, loss = progress_fit(m, sgd(m), torch.zeros(1, 3, 4), torch.tensor([[True, True, False]]), torch.tensor([1.0]))
    assert c.tolist() == [[0.25, 0.25, 0.0]] and loss == pytest.approx(0.25)   # (0.5 - 1)^2
    assert m.c.item() == pytest.approx(0.45)                     # dL/dc = 2 (2c - 1) * 2 = -2


def test_sweet_fit_by_hand():
    m = Const(0.0)
    adv, loss = sweet_fit(m, sgd(m), torch.zeros(2, 1, 4), torch.ones(2, 1, dtype=torch.bool), torch.tensor([1.0, 0.0]),
                          torch.tensor([0, 0]))
    assert adv.tolist() == [[0.0], [0.0]] and loss == pytest.approx(math.log(2))   # -log sigmoid(0)
    assert m.c.item() == 0.0                                     # equal turn counts: the pair's difference has no c
    adv2, loss2 = sweet_fit(m, sgd(m), torch.zeros(2, 1, 4), torch.ones(2, 1, dtype=torch.bool),
                            torch.tensor([1.0, 0.0]), torch.tensor([0, 1]))
    assert loss2 == 0.0                                          # no same-group pair


def test_group_center_by_hand():
    x = torch.tensor([[1.0, 3.0], [2.0, 9.0], [5.0, 5.0]])
    m = torch.tensor([[True, True], [True, False], [True, False]])
    out = group_center(x, m, torch.tensor([7, 7, 3]))
    assert out.tolist() == [[-1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]      # group 7 mean 2; group 3 alone


def test_archer_fit_by_hand():
    torch.manual_seed(0)
    online = DoubleCritic(2, 2, hidden=3)
    for p in online.parameters():
        nn.init.zeros_(p)
    target = DoubleCritic(2, 2, hidden=3)
    for p in target.parameters():
        nn.init.zeros_(p)
    s = torch.zeros(1, 1, 2)
    q, v, q_loss, v_loss = archer_fit(online, target, sgd(online), s, s, torch.tensor([[1.0]]),
                                      torch.ones(1, 1, dtype=torch.bool), gamma=0.95, tau=0.1)
    assert q.tolist() == [[[0.0, 0.0]]] and v.tolist() == [[[0.0, 0.0]]]
    assert q_loss == pytest.approx(1.0) and v_loss == 0.0        # Q target r = 1 (done), V target Qbar = 0
    bias = online.q_heads[0].net[-1].bias.item()
    assert bias == pytest.approx(0.1)                            # d/db mean_j (b_j - 1)^2 = -1 per head, lr 0.1
    assert target.q_heads[0].net[-1].bias.item() == pytest.approx(0.01)   # Polyak: 0.9 * 0 + 0.1 * 0.1
    assert online.v_heads[0].net[-1].bias.item() == 0.0


def test_info_gain_and_pair_accuracy_by_hand():
    ig = info_gain(torch.tensor([[0.1, 0.3, 0.2], [0.5, 0.7, 0.0]]), torch.tensor([[True, True], [True, False]]))
    assert torch.allclose(ig, torch.tensor([[0.2, -0.1], [0.2, 0.0]]))
    with pytest.raises(ValueError, match="p_answer"):
        info_gain(torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool))
    assert pair_accuracy(torch.tensor([2.0, 0.0, 1.0]), torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 0, 0])) == 1.0
    assert pair_accuracy(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0]), torch.tensor([0, 0])) == 0.0
    assert math.isnan(pair_accuracy(torch.zeros(2), torch.ones(2), torch.tensor([0, 0])))


def test_prefix_ends_by_hand():
    turn = lambda g, o: SimpleNamespace(gen=[0] * g, obs=[0] * o)            # noqa: E731
    eps = [SimpleNamespace(prompt=[1, 2, 3], turns=[turn(2, 4), turn(2, 0)]),
           SimpleNamespace(prompt=[1], turns=[turn(1, 1)])]
    assert prefix_ends(eps, 2).tolist() == [[3, 9, 11], [1, 3, -1]]


class LengthPolicy:
    """logprobs: log(t / 10) for the token at position t (so an answer at position t has probability t / 10)."""

    def __init__(self):
        self.allowed = None

    def logprobs(self, tokens, attn, *, allowed=None, temperature=1.0):
        self.allowed = allowed
        t = torch.arange(tokens.shape[1], dtype=torch.float32).expand(tokens.shape)
        return torch.log(t.clamp(min=1) / 10) * attn, torch.zeros(tokens.shape)


def test_answer_probs_by_hand():
    tokens = torch.arange(1, 11)[None]                           # (1, 10)
    ends = np.array([[3, 5, 9]])
    pol = LengthPolicy()
    p = answer_probs(pol, tokens, ends, [[42]])                  # a one-token answer right after each prefix
    assert torch.allclose(p, torch.tensor([[0.3, 0.5, 0.9]]))
    p2 = answer_probs(pol, tokens, ends, [[42, 43]])             # two tokens: the geometric mean of t / 10
    assert torch.allclose(p2, torch.tensor([[math.sqrt(0.12), math.sqrt(0.30), math.sqrt(0.90)]]))
    p3 = answer_probs(pol, tokens, np.array([[3, -1, -1]]), [[42]])
    assert torch.allclose(p3, torch.tensor([[0.3, 0.0, 0.0]]))   # past the last turn: 0


def test_answer_probs_grammar_counts_only_decided_tokens():
    codec = ToyCodec(n_think=2, n_actions=3, n_obs=4, think_max=0)
    g = codec.grammar(True)
    pol = LengthPolicy()
    ans = codec.action_ids(None, 1)                              # [END, act0 + 1]: END is written, not chosen
    p = answer_probs(pol, torch.arange(1, 11)[None], np.array([[3, 5]]), [ans], grammar=g)
    assert torch.allclose(p, torch.tensor([[0.4, 0.6]]))         # the action token sits at position end + 1
    act_row = pol.allowed[0, 4]                                  # the action's sampling set: the actions only
    assert act_row[codec.act0:codec.obs0].all() and int(act_row.sum()) == 3


def test_needs_vocabulary():
    assert check_needs(["values"], "x") == ("values",)
    with pytest.raises(ValueError, match="unknown need 'q'"):
        check_needs(["q"], "x")
    with pytest.raises(ValueError, match="sequence"):
        check_needs("values", "x")
    assert all(n.built for n in NEEDS.values()) and NEEDS["info_gain"].env_method == "answer_action"
    with pytest.raises(ValueError, match="estimator 'x': unknown need 'critic'"):
        register_estimator("x", needs=("critic",))
    with pytest.raises(ValueError, match="unknown need"):
        Scheme(ppo, needs=("z",))
    with pytest.raises(ValueError, match="level"):
        Filter(lambda batch: None, level="token")
