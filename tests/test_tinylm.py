"""TinyLM and the text codec: tokenizer round trips, text parsing (malformed text = void turn), BC
data from the shipped demos, checkpoints, the factory names, and BC + RL learning GridWorld 4x4."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from toyrl.cli import main as cli_main
from toyrl.envs import make_core
from toyrl.envs.core import VOID
from toyrl.policies import TinyLM
from toyrl.train.build import build_policy, check_policy_name, is_policy_name, policy_names
from toyrl.policies.tinylm import DEFAULT_CHECKPOINT, build_tokenizer
from toyrl.train.pretrain import bc_examples, greedy_success, pretrain
from toyrl.rollout import recompute_logp, rollout
from toyrl.codecs.text import TextCodec, WordTokenizer, compact_text
from toyrl.diagnostics import repetition_rate, text_template_stats
from toyrl.train import RunLog, TrainConfig, Trainer


TOK = build_tokenizer()


@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126) | st.just("\n"), max_size=60))
@settings(max_examples=60, deadline=None)
def test_tokenizer_round_trip(text):
    assert TOK.decode(TOK.encode(text)) == text


def test_tokenizer_words_and_map_rows():
    ids = TOK.encode("move[down]\nSFHG")
    assert [TOK.vocab[i] for i in ids] == ["move", "[", "down", "]", "\n", "S", "F", "H", "G"]
    assert WordTokenizer(TOK.words).vocab == TOK.vocab                           # rebuilt from its words
    assert TOK.decode([TOK.bos_id, TOK._id["move"], TOK.eos_id]) == "move"       # specials are dropped


def _grid(n=3, **kw):
    core = make_core("gridworld", n, seed=0, map_name="4x4", max_turns=10, **kw)
    core.reset(core.sample_tasks(np.random.default_rng(0), n))
    return core


def test_codec_prompt_observe_parse():
    codec, core = TextCodec(TOK), _grid()
    assert TOK.decode(codec.prompt(core, 0)) == "AFFF\nFHFH\nFFFH\nHFFG\n> "
    replies = ["move[down]", "move[dow", "I would go left: move[left]"]
    gen = torch.zeros(3, 32, dtype=torch.long)
    mask = torch.zeros(3, 32, dtype=torch.bool)
    for j, r in enumerate(replies):
        ids = TOK.encode(r)
        gen[j, :len(ids)], mask[j, :len(ids)] = torch.tensor(ids), True
    assert codec.parse(core, np.arange(3), gen, mask).tolist() == [1, VOID, 0]
    stops = set(codec.stop_tokens().tolist())
    assert TOK.encode("]")[0] in stops and TOK.eos_id in stops and codec.allowed() is None
    core.step(np.array([1, VOID, 0]))
    assert TOK.decode(codec.observe(core, 0)) == "\nSFFF\nAHFH\nFFFH\nHFFG\n> "


def test_compact_text_mock_search():
    core = make_core("mock_search", 1, seed=0)
    core.reset(np.array([[0]]))
    assert compact_text(core, 0, True).startswith("Question: ")
    a = core.chain(0)[0]
    core.step(np.array([core.parse_action(f"search[{a}]")]))
    assert compact_text(core, 0, False).startswith(f"Result of search[{a}]: ")
    core.step(np.array([VOID]))
    assert compact_text(core, 0, False).startswith("Your last reply")


def test_bc_examples_replay_the_demos():
    """Replaying the shipped demos through the text codec reproduces their expert replies exactly."""
    codec = TextCodec(TOK)
    ex = bc_examples("gridworld", codec, env_kwargs={"size": 4, "max_turns": 10})
    assert len(ex) == 1200
    assert {TOK.decode(g) for _, g in ex} == {"move[down]", "move[right]"}          # S top left, G bottom right


def test_text_diagnostics():
    h, mi = text_template_stats(["search[A]", "search[B]"], [0, 1])
    assert h == pytest.approx(0.0) and mi == pytest.approx(0.0)
    h, mi = text_template_stats(["search[A]", "answer[B]"], [0, 1])
    assert h == pytest.approx(np.log(2)) and mi == pytest.approx(np.log(2))
    assert repetition_rate([["a", "a", "b"]]) == 0.5


def test_tinylm_logp_matches_and_save_load(tmp_path):
    model = TinyLM.from_scratch(TOK, seed=0)
    core = _grid(4)
    codec = model.codec()
    ro = rollout(model, core, core.sample_tasks(np.random.default_rng(0), 4), np.arange(4), codec=codec,
                 context="last_k", context_k=1, generator=torch.Generator().manual_seed(0))
    logp, _ = recompute_logp(model, ro, "matched")
    assert float(((logp.detach() - ro.batch.old_logp).abs() * ro.batch.policy_mask).max()) < 1e-4
    path = model.save(tmp_path / "m.pt", {"note": 1})
    again = TinyLM.load(path)
    assert again.meta == {"note": 1} and again.tokenizer.vocab == model.tokenizer.vocab
    tok = torch.tensor([TOK.encode("AFFF\n> move[down]")])
    diff = (again(tok) - model(tok)).abs().max()
    assert diff < 0.05                                                         # fp16 storage
    assert path.stat().st_size < 2e6


def test_policy_names_and_factory(tmp_path):
    assert {"tinylm", "tinylm:scratch", "tinylm:PATH", "hf:PATH"} <= set(policy_names())
    assert is_policy_name("tinylm") and is_policy_name("tinylm:scratch")
    assert not is_policy_name("tinylm:" + str(tmp_path / "nope.pt")) and not is_policy_name("gpt")
    with pytest.raises(ValueError, match=r"^policy 'tinylm:.*nope.pt': path .*nope.pt does not exist$"):
        check_policy_name("tinylm:" + str(tmp_path / "nope.pt"))
    with pytest.raises(ValueError, match=r"^policy 'tinylm:.*': path .* is a directory, not a TinyLM checkpoint"):
        check_policy_name(f"tinylm:{tmp_path}")
    core = _grid(2)
    policy, codec = build_policy("tinylm:scratch", core, "cpu", seed=0)
    assert isinstance(codec, TextCodec) and policy.vocab_size == codec.size
    with pytest.raises(ValueError, match="autocast"):
        build_policy("tiny", core, "cpu", autocast="bf16")
    policy, _ = build_policy("tinylm:scratch", core, "cpu", autocast="bf16")
    tok = torch.tensor([TOK.encode("AFFF\n> move[down]")])
    logp, _ = policy.logprobs(tok, torch.ones_like(tok, dtype=torch.bool))
    assert logp.dtype == torch.float32 and torch.isfinite(logp).all()


def test_pretrain_lowers_the_loss_and_cli(tmp_path):
    model = TinyLM.from_scratch(TOK, seed=0)
    losses = pretrain(model, steps=6, batch_size=8, envs={"gridworld": {"size": 4, "max_turns": 10}},
                      verbose=False)
    assert losses[-1] < losses[0]
    from toyrl.train.pretrain import main
    assert main(["--steps", "2", "--batch-size", "4", "--no-eval", "--out", str(tmp_path / "c.pt")]) == 0
    assert is_policy_name(f"tinylm:{tmp_path / 'c.pt'}")
    assert TinyLM.load(tmp_path / "c.pt").trained_context == ("last_k", 1)          # what its BC data read
    for i, sep in enumerate(([], ["--"])):         # `toyrl pretrain --steps 1 ...` as written, and the old `--` form
        out = tmp_path / f"cli{i}.pt"
        assert cli_main(["pretrain", *sep, "--steps", "1", "--batch-size", "2", "--no-eval", "--out", str(out)]) == 0
        assert TinyLM.load(out).meta["command"] == f"toyrl pretrain --steps 1 --batch-size 2 --no-eval --out {out}"


def test_shipped_checkpoint():
    assert DEFAULT_CHECKPOINT.exists() and DEFAULT_CHECKPOINT.stat().st_size < 3e6
    model = TinyLM.load()
    assert model.meta["steps"] > 0 and "command" in model.meta
    assert model.trained_context == ("last_k", 1)                # bc_examples' context: the prompt and the last turn
    # BC alone gets the reply format right on unseen random 4x4 maps
    assert greedy_success(model, "gridworld", {"size": 4, "max_turns": 10}, n=32) >= 0.3


@pytest.mark.parametrize("temperature", [0.0, 0.75, 1.5, 3.0])
def test_reply_panel_over_the_slider(temperature):
    from toyrl.viz.small_llm import reply_panel
    r = reply_panel(temperature, n=4)
    assert 0 <= r["void_rate"] <= 1 and 0 <= r["success"] <= 1 and all(isinstance(t, str) for t in r["replies"])


def test_a_run_reads_the_context_the_checkpoint_was_trained_with():
    """TrainConfig(context=None), the default: a TinyLM checkpoint's own context (the shipped one: last_k,
    one turn); an explicit context wins; a checkpoint that records none (scratch) reads full. The
    shipped checkpoint under the full context it never saw writes mostly void replies."""
    kw = dict(env="gridworld", env_kwargs={"map_name": "4x4"}, max_turns=8, group_size=4, prompts_per_step=2,
              progress=False)
    cfg = TrainConfig(policy="tinylm", **kw)
    tr = Trainer(cfg)
    assert (tr.cfg.context, tr.cfg.context_k, tr.sampling.context, tr.log.config["context"]) == ("last_k", 1, "last_k",
                                                                                                "last_k")
    assert cfg.context is None                                   # the caller's config is left as it was
    full = Trainer(TrainConfig(policy="tinylm", context="full", **kw))
    assert (full.cfg.context, full.cfg.context_k) == ("full", 2)
    assert Trainer(TrainConfig(policy="tinylm:scratch", **kw)).cfg.context == "full"
    void = [float(b.void_turn[b.turn_mask].float().mean()) for b in (tr.sample().batch, full.sample().batch)]
    assert void[0] < 0.1 and void[1] > 0.3                       # measured 0.00 and 0.75 (64 episodes, 10 turns)


def test_cli_train_tinylm(tmp_path):
    out = tmp_path / "run.jsonl"
    rc = cli_main(["train", "--policy", "tinylm", "--env", "gridworld", "--env-kw", 'map_name="4x4"',
                   "--max-turns", "8", "--steps", "1", "--group-size", "4", "--prompts", "2", "--lr", "3e-4",
                   "--context", "last_k", "--context-k", "1", "--no-progress", "--out", str(out)])
    assert rc == 0 and len(RunLog.load(out).rows) == 1


RL = dict(env="gridworld", env_kwargs={"map_name": "4x4"}, policy="tinylm", max_turns=8, context="last_k",
          context_k=1, estimator="grpo", group_size=8, prompts_per_step=2, lr=3e-4, progress=False)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bc_plus_rl_learns_gridworld_4x4(seed):
    """The shipped BC checkpoint + RL_STEPS GRPO steps: >= 90% sampled success on the 4x4 map
    (64 episodes at temperature 1). Measured: see the report / notebook 9."""
    tr = Trainer(TrainConfig(steps=RL_STEPS, seed=seed, **RL))
    for _ in range(RL_STEPS):
        tr.step()
    tr.policy.eval()
    tasks = np.repeat(tr.core.sample_tasks(np.random.default_rng(seed), 1), 64, 0)
    core = make_core("gridworld", 64, seed=seed, map_name="4x4", max_turns=8)
    ro = rollout(tr.policy, core, tasks, np.zeros(64, int), codec=tr.codec, context="last_k", context_k=1,
                 generator=torch.Generator().manual_seed(seed))
    assert float(ro.success.float().mean()) >= 0.9


RL_STEPS = 15
