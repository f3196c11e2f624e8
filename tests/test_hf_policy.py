"""HFPolicy: a tiny random GPT-2 / Llama + a locally trained tokenizer, behind the TokenPolicy protocol.

Nothing is downloaded: the model and the tokenizer are built here and saved to a temp directory.
"""
import numpy as np
import pytest
import torch

from toyrl.cli import main as cli_main
from toyrl.envs import make_core
from toyrl.policies import HFPolicy
from toyrl.train.build import build_policy, check_policy_name, is_policy_name
from toyrl.rollout import recompute_logp, rollout
from toyrl.train import RunLog, TrainConfig

from conftest import NoCache, make_local_model

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")


def make_char_model(path, n_positions: int):
    """A tiny random GPT-2 with ``n_positions`` positions and a character-level tokenizer (one token a
    character: a GridWorld episode is thousands of tokens) saved to ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
    chars = sorted(set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;[]()<>|\n-_'!?=+*/"))
    tk = Tokenizer(models.WordLevel({"<|endoftext|>": 0, **{c: i + 1 for i, c in enumerate(chars)}},
                                    unk_token="<|endoftext|>"))
    tk.pre_tokenizer, tk.decoder = pre_tokenizers.Split("", "isolated"), decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_positions=n_positions, n_embd=32, n_layer=2, n_head=2, vocab_size=len(tok),
                               bos_token_id=0, eos_token_id=0)).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def char_dir(tmp_path_factory):
    """GPT-2 with 1024 positions reading characters: a full-context GridWorld episode (32 turns) outgrows it."""
    return make_char_model(tmp_path_factory.mktemp("char"), 1024)


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return make_local_model(tmp_path_factory.mktemp("gpt2"), "gpt2")


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return make_local_model(tmp_path_factory.mktemp("llama"), "llama", chat=True)


def test_policy_names(gpt2_dir, tmp_path):
    assert is_policy_name("hf:" + gpt2_dir)
    assert not is_policy_name("hf:" + str(tmp_path / "missing"))
    assert not is_policy_name("hf:")
    with pytest.raises(FileNotFoundError):
        HFPolicy.from_pretrained(tmp_path / "missing")


def test_check_policy_name_says_what_is_wrong(gpt2_dir, tmp_path):
    check_policy_name("hf:" + gpt2_dir)
    with pytest.raises(ValueError) as e:
        check_policy_name("hf:/no/such/dir")
    assert str(e.value) == "policy 'hf:/no/such/dir': path /no/such/dir does not exist"
    with pytest.raises(ValueError, match=r"^policy 'hf:.*': path .* has no config.json \(hf:PATH needs a local"):
        check_policy_name(f"hf:{tmp_path}")
    (tmp_path / "w.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="is not a directory"):
        check_policy_name(f"hf:{tmp_path / 'w.bin'}")
    for bad in ("x", "hf:", "gpt"):
        with pytest.raises(ValueError, match=rf"^unknown policy '{bad}'; valid: base, small, tiny, tinylm, .*hf:PATH$"):
            check_policy_name(bad)
        assert not is_policy_name(bad)


def test_an_episode_outgrowing_the_positions_stops_at_construction(char_dir):
    """A full-context GridWorld episode of a character-level GPT-2 (7000+ tokens) outgrows its 1024
    positions: the Trainer refuses it before any rollout, naming the bound, n_positions and last_k
    (the default context of an HF policy is full). last_k context fits and trains a step."""
    from toyrl.train import Trainer
    kw = dict(env="gridworld", env_kwargs={"map_name": "4x4"}, policy="hf:" + char_dir, steps=1, group_size=2,
              prompts_per_step=2, lr=1e-3, progress=False)
    for context in (None, "full"):
        with pytest.raises(ValueError, match=r"^context='full': an episode of gridworld can reach \d+ tokens .*more "
                                             r"than policy 'hf:.*' holds \(n_positions=1024\); use --context last_k"):
            Trainer(TrainConfig(context=context, **kw))
    with pytest.raises(ValueError, match=r"context_k=9: .*use --context last_k --context-k 3 "):
        Trainer(TrainConfig(context="last_k", context_k=9, **kw))
    tr = Trainer(TrainConfig(context="last_k", context_k=1, max_turns=3, **kw))
    row = tr.step()
    assert np.isfinite(row["loss"]) and tr.cfg.context == "last_k" and tr.cfg.context_k == 1


def test_generate_never_reads_past_the_positions(tmp_path):
    """A call that would need more positions than the model has is a ValueError up front (not an
    IndexError in the position embeddings); one that needs exactly n_positions runs."""
    policy = HFPolicy.from_pretrained(make_char_model(tmp_path / "m", 16))
    ctx = torch.randint(1, 20, (2, 12))
    mask = torch.ones_like(ctx, dtype=torch.bool)
    mask[1, :3] = False                                               # left padding takes no position
    policy.generate(ctx, mask, 5)                                     # 12 + 5 - 1 = 16 positions
    with pytest.raises(ValueError, match=r"needs 17 positions, more than the model holds \(n_positions=16\)"):
        policy.generate(ctx, mask, 6)
    with pytest.raises(ValueError, match="n_positions=16"):
        policy.logprobs(torch.randint(1, 20, (1, 17)), torch.ones(1, 17, dtype=torch.bool))


@pytest.mark.parametrize("which", ["gpt2", "llama"])
@pytest.mark.parametrize("context", ["full", "last_k"])
def test_rollout_logp_matches_recompute(which, context, gpt2_dir, llama_dir):
    """Sampling with the KV cache and teacher-forced recompute agree (left padding, mid padding)."""
    path = gpt2_dir if which == "gpt2" else llama_dir
    core = make_core("gridworld", 4, seed=0, map_name="4x4", max_turns=3)
    policy, codec = build_policy("hf:" + path, core, "cpu")
    assert codec.allowed() is None and len(codec.stop_tokens()) >= 2
    tasks = core.sample_tasks(np.random.default_rng(0), 4)
    ro = rollout(policy, core, tasks, np.arange(4) // 2, codec=codec, context=context, context_k=1,
                 generator=torch.Generator().manual_seed(0))
    b = ro.batch
    logp, _ = recompute_logp(policy, ro, "matched")
    assert float(((logp.detach() - b.old_logp).abs() * b.policy_mask).max()) < 1e-4
    assert b.obs_mask.any() and not (b.obs_mask & b.policy_mask).any()       # observations are env tokens


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_cache_across_turns_equals_rereading_the_context(which, gpt2_dir, llama_dir):
    """With the full context each turn feeds only the new observation to the cache kept from the
    previous turn; the episodes and log-probs equal re-reading the whole context every turn."""
    path = gpt2_dir if which == "gpt2" else llama_dir
    core = make_core("gridworld", 4, seed=0, map_name="4x4", max_turns=4)
    policy, codec = build_policy("hf:" + path, core, "cpu")
    tasks = core.sample_tasks(np.random.default_rng(1), 4)
    a = rollout(policy, core, tasks, np.arange(4), codec=codec, generator=torch.Generator().manual_seed(3))
    b = rollout(NoCache(policy), core, tasks, np.arange(4), codec=codec, generator=torch.Generator().manual_seed(3))
    assert a.batch.H >= 2 and torch.equal(a.batch.tokens, b.batch.tokens)
    assert torch.allclose(a.batch.old_logp, b.batch.old_logp, atol=1e-4)


def test_cached_and_uncached_generation_agree_up_to_the_last_position(tmp_path):
    """Turn 2 continued from turn 1's KV cache (feeding only the new tokens) gives the tokens and
    log-probs of re-reading the whole prefix, on a model whose positions the two turns fill exactly."""
    policy = HFPolicy.from_pretrained(make_char_model(tmp_path / "m", 32))
    g = torch.Generator().manual_seed(0)
    ctx = torch.randint(1, 40, (3, 8), generator=g)
    mask = torch.ones_like(ctx, dtype=torch.bool)
    mask[1, :2] = mask[2, :5] = False                                 # left padding
    first = policy.generate(ctx, mask, 6, generator=torch.Generator().manual_seed(1))
    new = torch.randint(1, 40, (3, 7), generator=g)
    new_mask = torch.ones_like(new, dtype=torch.bool)
    new_mask[0, :3] = False
    # the longest row: 8 context + 6 generated + 7 new + 12 - 1 = 32 positions
    a = policy.generate(new, new_mask, 12, generator=torch.Generator().manual_seed(2), past=first.past)
    whole = torch.cat([ctx, first.tokens, new], 1)
    whole_mask = torch.cat([mask, first.mask, new_mask], 1)
    b = policy.generate(whole, whole_mask, 12, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.mask, b.mask)
    assert torch.allclose(a.logp, b.logp, atol=1e-5) and torch.allclose(a.entropy, b.entropy, atol=1e-5)
    # and both equal teacher-forced recompute of the whole sequence
    seq, seq_mask = torch.cat([whole, a.tokens], 1), torch.cat([whole_mask, a.mask], 1)
    logp, _ = policy.logprobs(seq, seq_mask)
    assert torch.allclose(logp[:, -12:] * a.mask, a.logp, atol=1e-5)


def test_chat_template_strings(llama_dir):
    policy = HFPolicy.from_pretrained(llama_dir)
    codec = policy.codec(render="compact")
    assert codec.template == ("<|user|>", "<|endoftext|><|assistant|>", "<|endoftext|><|user|>")
    core = make_core("gridworld", 1, map_name="4x4")
    core.reset(core.sample_tasks(np.random.default_rng(0), 1))
    text = policy.tokenizer.decode(codec.prompt(core, 0))
    assert text == "<|user|>AFFF\nFHFH\nFFFH\nHFFG<|endoftext|><|assistant|>"


def test_bf16_autocast_runs(gpt2_dir):
    policy = HFPolicy.from_pretrained(gpt2_dir, autocast="bf16")
    tok = torch.tensor([[5, 6, 7, 8]])
    logp, ent = policy.logprobs(tok, torch.ones_like(tok, dtype=torch.bool))
    assert logp.dtype == torch.float32 and torch.isfinite(logp).all() and torch.isfinite(ent).all()


def test_lora_needs_peft_or_wraps(gpt2_dir):
    try:
        import peft  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="peft"):
            HFPolicy.from_pretrained(gpt2_dir, lora={"r": 4})
        return
    policy = HFPolicy.from_pretrained(gpt2_dir, lora={"r": 4, "target_modules": ["c_attn"]})
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    assert 0 < trainable < sum(p.numel() for p in policy.parameters())


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_cli_trains_two_steps(which, gpt2_dir, llama_dir, tmp_path):
    """`toyrl train --policy hf:PATH` runs two GRPO steps end to end and writes a finite log."""
    path = gpt2_dir if which == "gpt2" else llama_dir
    out = tmp_path / "run.jsonl"
    rc = cli_main(["train", "--policy", f"hf:{path}", "--env", "gridworld", "--env-kw", 'map_name="4x4"',
                   "--max-turns", "2", "--steps", "2", "--group-size", "2", "--prompts", "2", "--lr", "1e-3",
                   "--context", "last_k", "--context-k", "1", "--no-progress", "--out", str(out)])
    assert rc == 0
    rows = RunLog.load(out).rows
    assert len(rows) == 2 and all(np.isfinite(r["loss"]) and r["tokens_generated"] > 0 for r in rows)


def test_trainer_updates_weights(gpt2_dir):
    from toyrl.train import Trainer
    cfg = TrainConfig(env="gridworld", env_kwargs={"map_name": "4x4"}, policy="hf:" + gpt2_dir, max_turns=2,
                      steps=1, group_size=2, prompts_per_step=2, lr=1e-2, context="last_k", context_k=1,
                      entropy_coef=0.01, progress=False)
    tr = Trainer(cfg)
    before = [p.detach().clone() for p in tr.policy.parameters()]
    row = tr.step()
    assert np.isfinite(row["loss"])
    assert any(not torch.equal(a, p) for a, p in zip(before, tr.policy.parameters()))
