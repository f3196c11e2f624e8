"""toyrl doctor (toyrl.port.doctor*): each check passes correct batches (hand-made, a toyrl rollout, verl's own
advantage functions) and flags its planted bug; the report, the loaders and the CLI's exit codes."""
from __future__ import annotations

import json
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from toyrl.cli.commands import main
from toyrl.port import doctor_checks as C
from toyrl.port.doctor import (diagnose, example_fields, from_dataproto, from_dict, from_trl, from_verl, load_batch,
                               read, report, verl_fields)
from toyrl.port.doctor_view import run_edges, turn_bounds
from toyrl.port.verl import compute_reinforce_plus_plus_outcome_advantage

P = 3   # prompt width of example_fields


def problems(view) -> dict:
    """{check: [severities]} of the errors and warnings."""
    out = {}
    for f in diagnose(view):
        if f.severity in ("error", "warning"):
            out.setdefault(f.check, []).append(f.severity)
    return out


def with_rpp(f: dict, gamma: float = 0.9) -> dict:
    """example fields plus REINFORCE++ advantages / returns from toyrl's port of verl's function."""
    adv, ret = compute_reinforce_plus_plus_outcome_advantage(f["token_level_rewards"], f["response_mask"],
                                                             config={"gamma": gamma})
    return dict(f, advantages=adv, returns=ret)


def rpp_reset(rewards, mask, gamma):
    """REINFORCE++ reward-to-go as verl had it before verl#6376: the running return restarts at every mask 0."""
    ret, run = torch.zeros_like(rewards), torch.zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        run = rewards[:, t] + gamma * run
        ret[:, t] = run
        run = run * mask[:, t]
    return ret


# ---- turns from masks -----------------------------------------------------------------------------------
def test_run_edges_and_turn_bounds_examples():
    first, last = run_edges(torch.tensor([[0, 1, 1, 0, 1]]))
    assert first.int().tolist() == [[0, 1, 0, 0, 1]] and last.int().tolist() == [[0, 0, 1, 0, 1]]
    f, l, ok = turn_bounds(torch.tensor([[1, 1, 0, 1], [0, 1, 0, 0]], dtype=torch.bool))
    assert f.tolist() == [[0, 3], [1, 0]] and l.tolist() == [[1, 3], [1, 0]] and ok.tolist() == [[1, 1], [1, 0]]


# ---- correct batches pass -------------------------------------------------------------------------------
def test_clean_example_batch_passes_every_check():
    view = from_verl(with_rpp(example_fields()))
    text, rec = report(view, diagnose(view))
    assert rec["errors"] == 0 and rec["warnings"] == 0 and "no error found" in text
    assert rec["turns"] == int(run_edges(example_fields()["response_mask"])[0].sum()) == 17
    assert set(rec["skipped"]) == {"per_turn_rewards_dropped"} and len(rec["passed"]) == 8


def test_clean_toyrl_rollout_passes():
    from toyrl.envs import make_core
    from toyrl.policies import make_policy
    from toyrl.rollout import ToyCodec, rollout
    core = make_core("bandit_chain", 8, seed=0)
    codec = ToyCodec.for_core(core)
    tasks = np.repeat(core.sample_tasks(np.random.default_rng(0), 2), 4, 0)
    ro = rollout(make_policy("tiny", codec.size, seed=0), core, tasks, np.repeat(np.arange(2), 4), codec=codec,
                 generator=torch.Generator().manual_seed(0))
    fields = with_rpp(verl_fields(ro.batch))
    view = from_verl(fields)
    assert view.policy.sum() == ro.batch.policy_mask.sum()
    assert torch.equal(run_edges(view.policy)[0].sum(1), ro.batch.num_turns())     # the turns, rebuilt
    assert torch.allclose(view.rewards.sum(1), ro.batch.outcome().double())
    found = diagnose(view)
    assert not [f for f in found if f.severity == "error"]
    outcome = ro.batch.outcome().view(2, 4)
    flat = int((outcome.amax(1) == outcome.amin(1)).sum())                       # groups with one reward
    assert [f.count for f in found if f.severity == "warning"] == ([flat] if flat else [])


def test_clean_trl_batch_passes():
    mask = torch.ones(4, 6, dtype=torch.long)
    mask[1, 4:] = 0
    tool = torch.tensor([[1, 1, 0, 0, 1, 1]] * 4)
    lp = -torch.rand(4, 6)
    view = from_trl({"completion_ids": torch.randint(5, 50, (4, 6)), "completion_mask": mask, "tool_mask": tool,
                     "advantages": torch.tensor([1.0, -1.0, 0.5, -0.5]), "old_per_token_logps": lp,
                     "sampling_per_token_logps": lp + 0.01}, num_generations=2)
    assert problems(view) == {} and view.policy.sum() == 14 and view.tool.sum() == 8




@pytest.fixture
def core_algos():
    pytest.importorskip("verl")
    from toyrl.port.verl_loader import load_core_algos
    ca = load_core_algos()
    if ca is None:
        pytest.skip("verl's core_algos is not importable here")
    return ca


@pytest.mark.parametrize("estimator", ["gae", "grpo", "reinforce_plus_plus"])
def test_verl_own_advantages_pass(core_algos, estimator):
    f = example_fields(seed=1)
    r, m = f["token_level_rewards"], f["response_mask"]
    adv, ret = {"gae": lambda: core_algos.compute_gae_advantage_return(r, f["values"], m, gamma=1.0, lam=0.95),
                "grpo": lambda: core_algos.compute_grpo_outcome_advantage(r, m, f["uid"]),
                "reinforce_plus_plus": lambda: core_algos.compute_reinforce_plus_plus_outcome_advantage(
                    r, m, config=SimpleNamespace(gamma=0.9))}[estimator]()
    assert problems(from_verl(dict(f, advantages=adv, returns=ret))) == {}


def test_a_real_dataproto_reads_like_its_fields(core_algos, tmp_path):
    from verl.protocol import DataProto
    f = with_rpp(example_fields())
    dp = DataProto.from_single_dict(f)
    assert report(from_dataproto(dp), diagnose(from_dataproto(dp)))[1] == report(from_verl(f), diagnose(from_verl(f)))[1]
    dp.save_to_disk(tmp_path / "dp.pkl")
    assert main(["doctor", str(tmp_path / "dp.pkl")]) == 2                  # a pickle needs --trust
    assert main(["doctor", str(tmp_path / "dp.pkl"), "--trust"]) == 0


# ---- (1) policy mask over tool tokens -------------------------------------------------------------------
def test_policy_mask_rebuilt_from_attention_is_flagged():
    f = example_fields()
    f["response_mask"] = f["attention_mask"][:, P:].float()                 # as verl's compute_response_mask
    bad = C.check_policy_on_tool_tokens(from_verl(f))
    multi = tuple(int(i) for i in np.flatnonzero(f["__num_turns__"] > 2))
    assert [x.severity for x in bad] == ["error", "warning"]                # and the engine's 0 log-probs
    assert bad[0].rows == multi and "__num_turns__" in bad[0].message and "exactly 0" in bad[1].message
    assert C.check_policy_on_tool_tokens(from_verl(example_fields())) == []


def test_policy_mask_over_an_explicit_tool_mask_is_flagged():
    f = example_fields()
    obs = f["attention_mask"][:, P:].bool() & ~f["response_mask"].bool()
    f["obs_mask"] = obs
    assert C.check_policy_on_tool_tokens(from_verl(f)) == []
    f["response_mask"] = f["attention_mask"][:, P:]
    bad = C.check_policy_on_tool_tokens(from_verl(f))
    assert bad[0].severity == "error" and bad[0].count == int(obs.sum()) and "obs_mask" in bad[0].message


def test_zero_rollout_logprobs_inside_the_policy_mask_warn():
    f = example_fields()
    del f["__num_turns__"]
    f["response_mask"][3, 2:4] = 1                                          # row 3's tool tokens 2-3
    bad = C.check_policy_on_tool_tokens(from_verl(f))
    assert [(x.severity, x.rows, x.count) for x in bad] == [("warning", (3,), 2)]


# ---- (2) reward off a turn's last token -----------------------------------------------------------------
def test_reward_on_the_last_attended_token_is_flagged():
    f = example_fields()
    r = f["token_level_rewards"]
    ends = f["attention_mask"][:, P:].sum(1) - 1                            # verl#6392: the last attended token
    f["token_level_rewards"] = torch.zeros_like(r).index_put_((torch.arange(8), ends), r.sum(1))
    bad = C.check_reward_off_turn_end(from_verl(f))
    moved = tuple(int(b) for b in range(8) if f["response_mask"][b, ends[b]] == 0 and r[b].sum() != 0)
    assert moved and [(x.severity, x.rows) for x in bad] == [("error", moved)] and "tool/env token" in bad[0].message
    assert C.check_reward_off_turn_end(from_verl(example_fields())) == []


def test_reward_on_padding_and_inside_a_turn_are_flagged():
    f = example_fields()
    f["token_level_rewards"][0, 15] = 1.0                                   # padding
    f["token_level_rewards"][2, 0] = 0.5                                    # turn 1 is positions 0-2
    bad = {x.severity: x for x in C.check_reward_off_turn_end(from_verl(f))}
    assert bad["error"].rows == (0,) and "padding" in bad["error"].message
    assert bad["warning"].rows == (2,) and "not its turn's last" in bad["warning"].message


def test_dense_rewards_are_not_read_as_misplaced():
    f = example_fields()
    kl = -0.01 * f["response_mask"]                                         # a per-token KL penalty
    f["token_level_rewards"] = f["token_level_rewards"] + kl
    assert C.check_reward_off_turn_end(from_verl(f)) == []


# ---- (3) mask and token lengths -------------------------------------------------------------------------
def test_a_tool_mask_longer_than_the_completion_is_flagged():
    ids, mask = torch.randint(5, 50, (2, 12)), torch.ones(2, 12, dtype=torch.long)
    fields = {"completion_ids": ids, "completion_mask": mask, "tool_mask": torch.ones(2, 14, dtype=torch.long)}
    bad = C.check_length_mismatch(read(fields))
    assert bad[0].severity == "error" and "tool_mask (2, 14)" in bad[0].message and "(2, 12)" in bad[0].message
    assert C.check_length_mismatch(read(dict(fields, tool_mask=torch.ones(2, 12)))) == []


def test_a_policy_mask_past_the_sequence_and_a_short_uid_are_flagged():
    f = example_fields()
    f["response_mask"][1, 10:12] = 1
    f["uid"] = f["uid"][:6]
    bad = C.check_length_mismatch(from_verl(f))
    assert [x.severity for x in bad] == ["error", "error"]
    assert "uid (6,)" in bad[0].message and bad[1].rows == (1,) and bad[1].count == 2


# ---- (4) reward-to-go reset at tool tokens --------------------------------------------------------------
def test_reinforce_pp_reset_at_tool_tokens_is_flagged():
    f = example_fields()
    r, m = f["token_level_rewards"], f["response_mask"]
    bad = C.check_returns_reset_at_tool(from_verl(dict(f, returns=rpp_reset(r, m, 0.9))))
    _, _, ok = turn_bounds(m.bool())
    seen = (r.sum(1) != 0) & (ok.sum(1) >= 2)        # the boundary before a rewarded last turn: 0 | non-zero
    assert bad[0].severity == "error" and bad[0].count == int(seen.sum()) == 3 and bad[0].rows == (3, 5, 7)
    assert C.check_returns_reset_at_tool(from_verl(with_rpp(f))) == []


def gae_reset(rewards, values, mask, gamma, lam):
    """verl's GAE scan with mask 0 read as an episode end (the bug class of verl#6376, in GAE) -> returns A + V."""
    A, nextv, last = torch.zeros_like(rewards), torch.zeros(rewards.shape[0]), torch.zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        last = rewards[:, t] + gamma * nextv - values[:, t] + gamma * lam * last
        A[:, t] = last
        nextv, last = values[:, t] * mask[:, t], last * mask[:, t]
    return A + values


def test_gae_reset_at_tool_tokens_is_flagged(core_algos):
    f = example_fields()
    r, m, V = f["token_level_rewards"], f["response_mask"], f["values"]
    bad = C.check_returns_reset_at_tool(from_verl(dict(f, returns=gae_reset(r, V, m, 1.0, 0.95))))
    multi = {b for b in range(8) if int(run_edges(m[b:b + 1])[0].sum()) >= 2}          # rows with 2+ turns
    assert bad and bad[0].severity == "error" and {3, 5, 7} <= set(bad[0].rows) <= multi and bad[0].count >= 3
    _, ret = core_algos.compute_gae_advantage_return(r, V, m, gamma=1.0, lam=0.95)     # verl's own: carried over
    assert C.check_returns_reset_at_tool(from_verl(dict(f, returns=ret))) == []


# ---- (5) per-turn rewards dropped -----------------------------------------------------------------------
def test_dropped_per_turn_rewards_are_flagged():
    f = example_fields()
    m = f["response_mask"].bool()
    first, last, ok = turn_bounds(m)
    scores = [[0.5] * (int(ok[b].sum()) - 1) + [float(f["token_level_rewards"][b].sum())] for b in range(8)]
    f["turn_scores"] = np.array(scores, dtype=object)
    bad = C.check_per_turn_rewards_dropped(from_verl(f))                    # only the last reward placed
    dropped = tuple(b for b in range(8) if sum(x != 0 for x in scores[b]) >= 2)
    assert bad[0].severity == "error" and bad[0].rows == dropped and "only the last survives" in bad[0].message
    placed = torch.zeros_like(f["token_level_rewards"])
    for b in range(8):
        placed[b, last[b][ok[b]]] = torch.tensor(scores[b])
    assert C.check_per_turn_rewards_dropped(from_verl(dict(f, token_level_rewards=placed))) == []


# ---- (6) zero-variance groups ---------------------------------------------------------------------------
def test_zero_variance_groups_report_their_share():
    f = example_fields()
    f["token_level_rewards"][0, 3] = 1.0                                    # group prompt-0: rewards 1 and 1
    f["uid"] = np.array(list(f["uid"][:7]) + ["alone"], dtype=object)
    bad = C.check_zero_variance_groups(from_verl(f))
    assert [(x.severity, x.rows, x.count) for x in bad] == [("warning", (0, 1), 1), ("info", (), 2)]
    assert "1 of 3 groups (33%" in bad[0].message
    assert C.check_zero_variance_groups(from_verl(example_fields())) == []


# ---- (7) rollout vs trainer log-probs -------------------------------------------------------------------
def test_logprobs_shifted_by_one_are_flagged():
    f = example_fields()
    old = f["old_log_probs"]
    f["rollout_log_probs"] = torch.cat([old[:, 1:], old[:, -1:]], 1) * f["response_mask"]
    bad = C.check_logprob_gap(from_verl(f))
    assert bad[0].severity == "error" and "shifted by one position" in bad[0].message


def test_logprob_gaps_warn_and_fail_by_share():
    f = example_fields()
    f["rollout_log_probs"][3, 0] -= 1.0                                     # 1 of 28 policy tokens off
    one = C.check_logprob_gap(from_verl(f))
    assert one[0].severity == "error" and one[0].count == 1               # 1/28 > 1%
    assert C.check_logprob_gap(from_verl(f), share_tol=0.05)[0].severity == "warning"
    clean = C.check_logprob_gap(from_verl(example_fields()))
    assert clean[0].severity == "info" and "max |diff| 0.00" in clean[0].message


# ---- extra checks: attention holes, non-finite values ---------------------------------------------------
def test_a_loss_mask_used_as_attention_is_flagged():
    f = example_fields()
    f["attention_mask"] = torch.cat([f["attention_mask"][:, :P], f["response_mask"].long()], 1)
    bad = C.check_attention_holes(from_verl(f))
    gaps = (f["attention_mask"].cummax(1).values.bool() & f["attention_mask"].flip(1).cummax(1).values.flip(1).bool()
            & ~f["attention_mask"].bool())
    assert bad[0].severity == "error" and bad[0].count == int(gaps.sum()) > 0
    assert C.check_attention_holes(from_verl(example_fields())) == []


def test_nan_advantages_are_flagged():
    f = with_rpp(example_fields())
    f["advantages"][2, 1] = float("nan")
    bad = C.check_non_finite(from_verl(f))
    assert [(x.severity, x.rows, x.count) for x in bad] == [("error", (2,), 1)] and "advantages" in bad[0].message


# ---- report, loaders, bad input -------------------------------------------------------------------------
def test_report_counts_and_record():
    f = example_fields()
    f["response_mask"] = f["attention_mask"][:, P:].float()
    text, rec = report(from_verl(f), diagnose(from_verl(f)))
    assert rec["errors"] == sum(x["severity"] == "error" for x in rec["findings"]) >= 2
    assert text.startswith("toyrl doctor: verl batch, 8 rows x 16 response tokens") and "ERROR   policy_on" in text
    assert "policy_on_tool_tokens" not in rec["passed"] and json.loads(json.dumps(rec)) == rec


def test_bad_input_raises_value_error(tmp_path):
    with pytest.raises(ValueError, match="response_mask or attention_mask"):
        from_verl({"uid": np.array(["a"])})
    with pytest.raises(ValueError, match="must be 2-D"):
        from_dict({"policy_mask": torch.ones(4)})
    with pytest.raises(ValueError, match="format must be one of"):
        read({"policy_mask": torch.ones(1, 2)}, "megatron")
    with pytest.raises(ValueError, match="cannot tell the format"):
        read({"foo": torch.ones(1, 2)})
    with pytest.raises(ValueError, match="a dict of fields"):
        read([1, 2])
    with pytest.raises(ValueError, match="no such file"):
        load_batch(tmp_path / "nope.pt")


def test_cli_exit_codes(tmp_path, capsys):
    clean, bad = tmp_path / "clean.pt", tmp_path / "bad.pt"
    torch.save(with_rpp(example_fields()), clean)
    f = example_fields()
    f["returns"] = rpp_reset(f["token_level_rewards"], f["response_mask"], 0.9)
    torch.save(f, bad)
    assert main(["doctor", str(clean)]) == 0 and "no error found" in capsys.readouterr().out
    assert main(["doctor", str(bad), "--json"]) == 1
    rec = json.loads(capsys.readouterr().out)
    assert rec["errors"] == 1 and rec["findings"][0]["check"] == "returns_reset_at_tool"
    torch.save([1, 2], tmp_path / "list.pt")
    (tmp_path / "junk.pt").write_bytes(pickle.dumps(SimpleNamespace(a=1)))
    for path in (tmp_path / "missing.pt", tmp_path / "list.pt", tmp_path / "junk.pt"):
        assert main(["doctor", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("toyrl: error:") and err.count("\n") == 1
    assert main(["doctor", str(clean), "--format", "trl"]) == 2            # no completion_mask
