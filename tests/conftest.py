"""Suite-wide settings and the helpers test modules share (a test module never imports another).

Settings: one torch thread (the toy models are too small to gain from two, and the notebooks'
kernels and the suite share the machine's cores); matplotlib's Agg backend, chosen before any test
module is imported, and every figure a test opens closed after it.

Helpers (plain functions: ``from conftest import assert_close_to``; the random TurnBatch, the reference check and
the estimator properties a user's code needs too are public: ``toyrl.testing``):
- ``verl_loss_data``: random verl policy-loss inputs;
- ``assert_close_to``: a tensor against hand-computed values;
- ``fake_sweep``: a sweep (arm -> key -> (S, N) curves) of random numbers in [0, 1);
- ``line_data``, ``bar_heights``, ``image_data``: what an Axes draws, to assert on the data a panel shows;
- ``assert_curves_drawn``: an Axes draws exactly the curves of ``toyrl.viz.prototype.arm_curves``;
- ``assert_figure_standard``: a title naming the setting, labelled axes, every band in a legend, and
  ``assert_no_overlap``: no two drawn labels overlap and none leaves the figure;
- ``NoCache``: a policy that re-reads its whole context every turn (the reference for KV reuse);
- ``make_local_model``: a tiny random Hugging Face causal LM (GPT-2 or Llama) and tokenizer saved to a folder.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

torch.set_num_threads(1)


def pytest_configure(config):
    import matplotlib
    matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


# ---- tensors -------------------------------------------------------------------------------------------
def verl_loss_data(seed: int, B: int = 6, L: int = 9, scale: float = 0.6):
    """Random verl policy-loss inputs (float64): old and new log-probs, advantages, a response mask with one full
    and one empty row, and importance weights in [0.5, 1.5) -> (old, logp, adv, mask, w), each (B, L)."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, L, generator=g) > 0.3).float()
    mask[0] = 1.0
    mask[-1] = 0.0                                                   # an empty response
    old = -torch.rand(B, L, generator=g, dtype=torch.float64) * 3
    logp = old + scale * torch.randn(B, L, generator=g, dtype=torch.float64)
    adv = torch.randn(B, L, generator=g, dtype=torch.float64)
    w = torch.rand(B, L, generator=g, dtype=torch.float64) + 0.5
    return old, logp, adv, mask, w


def assert_close_to(a: torch.Tensor, b, tol: float = 1e-3) -> None:
    """``a`` equals the hand-computed values ``b`` (nested lists) up to ``tol``, absolute, in ``a``'s dtype."""
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), atol=tol, rtol=0)


# ---- sweeps and figures ---------------------------------------------------------------------------
def fake_sweep(arms, keys, S: int = 2, N: int = 6, seed: int = 0) -> dict:
    """{arm: {key: (S, N) list}} of uniform [0, 1) numbers, the shape ``toyrl.viz.prototype.compare`` returns."""
    rng = np.random.default_rng(seed)
    return {a: {k: rng.random((S, N)).tolist() for k in keys} for a in arms}


def line_data(ax) -> dict:
    """{label: (x, y)} of the labelled lines on ``ax`` (matplotlib's own ``_child`` labels left out)."""
    return {ln.get_label(): (np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata(), float))
            for ln in ax.get_lines() if not ln.get_label().startswith("_")}


def bar_heights(ax) -> list:
    """The heights of each bar group (``ax.bar`` or ``ax.hist`` call) on ``ax``, in drawing order."""
    return [np.array([r.get_height() for r in c]) for c in ax.containers]


def image_data(ax) -> np.ndarray:
    """The (masked) array of the first image on ``ax``."""
    return ax.get_images()[0].get_array()


def assert_curves_drawn(ax, curves: dict) -> None:
    """``ax`` draws one line per arm of ``curves`` (``arm_curves``' output), labelled by arm, at its x and mean."""
    drawn = line_data(ax)
    assert list(drawn) == list(curves)
    for name, c in curves.items():
        np.testing.assert_allclose(drawn[name][0], c["x"])
        np.testing.assert_allclose(drawn[name][1], c["mean"])


def _shown_ticklabels(axis, lo, hi) -> list:
    """The tick labels ``axis`` draws: non-empty, visible, at a position inside the view (lo..hi)."""
    out = []
    for minor in (False, True):
        for t in axis.get_ticklabels(minor=minor):
            pos = t.get_position()[0 if axis.axis_name == "x" else 1]
            if t.get_visible() and t.get_text() and min(lo, hi) <= pos <= max(lo, hi):
                out.append(t)
    return out


def figure_texts(fig) -> list:
    """(where, Text) of every label a reader sees: suptitle, figure texts, and per visible axes its titles,
    axis labels, drawn tick labels and legend texts."""
    items = [("suptitle", fig._suptitle)] if fig._suptitle is not None else []
    items += [("figure text", t) for t in fig.texts if t is not fig._suptitle]
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible() or not ax.axison:
            continue
        items += [(f"axes {i} title", t) for t in (ax.title, ax._left_title, ax._right_title)]
        for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            if axis.get_visible():
                items.append((f"axes {i} {axis.axis_name}label", axis.label))
                items += [(f"axes {i} {axis.axis_name} tick", t) for t in _shown_ticklabels(axis, lo, hi)]
        if ax.get_legend() is not None:
            items += [(f"axes {i} legend", t) for t in ax.get_legend().get_texts()]
    return [(w, t) for w, t in items if t.get_visible() and t.get_text().strip()]


def assert_no_overlap(fig, pad: float = 1.0) -> None:
    """No two labels of ``fig`` overlap (bounding boxes after ``fig.canvas.draw()``, shrunk by ``pad`` px) and
    every label lies inside the figure. The same text at the same place twice (a twin axis repeating a
    tick) counts once."""
    if not hasattr(fig.canvas, "get_renderer"):                                # a closed figure: draw it with Agg
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = []
    for where, t in figure_texts(fig):
        b = t.get_window_extent(r)
        boxes.append((where, t.get_text(), b.x0 + pad, b.y0 + pad, b.x1 - pad, b.y1 - pad))
    W, H = fig.bbox.width, fig.bbox.height
    out = [(w, s) for w, s, x0, y0, x1, y1 in boxes if x0 < -pad or y0 < -pad or x1 > W + pad or y1 > H + pad]
    assert not out, f"labels outside the figure: {out}"
    for i, (w1, s1, *a) in enumerate(boxes):
        for w2, s2, *b in boxes[i + 1:]:
            if s1 == s2 and np.allclose(a, b):
                continue
            hit = a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
            assert not hit, f"{w1} {s1!r} overlaps {w2} {s2!r}"


def assert_figure_standard(fig, *setting: str) -> None:
    """The figure standard: a title (suptitle or every axes title) that names each word of ``setting``; every
    visible axis labelled (colorbars aside); every band (a PolyCollection, ``fill_between``) labelled and its
    label in a legend of its axes; and ``assert_no_overlap``."""
    from matplotlib.collections import PolyCollection
    titles = ([fig._suptitle.get_text()] if fig._suptitle is not None else []) + \
        [ax.get_title() for ax in fig.axes if ax.get_visible()]
    title = " ".join(titles)
    assert title.strip(), "the figure has no title"
    for word in setting:
        assert word in title, f"the title {title!r} does not name {word!r}"
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible() or not ax.axison or ax.get_label() == "<colorbar>":
            continue
        if ax.xaxis.get_visible():
            assert ax.get_xlabel().strip(), f"axes {i} ({ax.get_title()!r}) has no x label"
        if ax.yaxis.get_visible():
            assert ax.get_ylabel().strip(), f"axes {i} ({ax.get_title()!r}) has no y label"
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        if bands:
            legends = [a.get_legend() for a in fig.axes if a.get_legend() is not None] + list(fig.legends)
            texts = {t.get_text() for leg in legends for t in leg.get_texts()}
            for c in bands:
                assert not c.get_label().startswith("_"), f"axes {i}: a band without a label"
                assert c.get_label() in texts, f"axes {i}: band {c.get_label()!r} is not in a legend"
    assert_no_overlap(fig)


class NoCache:
    """A policy without its KV cache across turns (``generate`` returns no ``past``): every turn
    re-reads its whole context, the reference the cached path must equal."""

    def __init__(self, policy):
        self.p, self.device, self.vocab_size = policy, policy.device, policy.vocab_size

    def generate(self, *a, **kw):
        out = self.p.generate(*a, **kw)
        out.past = None
        return out



def assert_projectable(fig, min_pt: float = 12.0):
    """Every visible text of ``fig`` (titles, labels, ticks, legends, annotations) is at least ``min_pt`` once the
    figure is scaled to a 16:9 slide (``toyrl.viz.style.projected_pt``): what a room reads from a projector."""
    from toyrl.viz.style import projected_pt
    fig.canvas.draw()
    small = []
    for t in fig.findobj(lambda a: hasattr(a, "get_fontsize") and hasattr(a, "get_text")):
        if t.get_visible() and t.get_text().strip() and projected_pt(fig, t.get_fontsize()) < min_pt - 1e-6:
            small.append(f"{t.get_text()[:30]!r} {t.get_fontsize():.1f} pt -> {projected_pt(fig, t.get_fontsize()):.1f}")
    assert not small, f"text under {min_pt} pt on a slide ({fig.get_size_inches()} in): " + "; ".join(small[:8])


# ---- a tiny Hugging Face model on disk -----------------------------------------------------------------
CHAT = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|endoftext|>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def make_local_model(path, kind="gpt2", chat=False, n_positions=1024):
    """Save a randomly initialized tiny causal LM and a byte-level BPE tokenizer (trained on a few
    env strings) to ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    texts = ["Lake 4x4 AFFF\nFHFH\nFFFH\nHFFG move[left] move[right] move[up] move[down]",
             "User: Assistant: You are at row 0, column 1. Turn 2 of 3."] * 5
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    if chat:
        tok.chat_template = CHAT
    ids = dict(vocab_size=len(tok), bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    if kind == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_positions=n_positions, n_embd=32, n_layer=2, n_head=2, **ids))
    else:
        model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=2, num_key_value_heads=1,
                                             max_position_embeddings=1024, **ids))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def without_time(x):
    """A run's data less its wall and CPU times (the only values two computations of a run do not share)."""
    if isinstance(x, dict):
        return {k: without_time(v) for k, v in x.items() if not (k.startswith("time_") or k in ("cpu_s", "time_s"))}
    if isinstance(x, list):
        return [without_time(v) for v in x]
    return x
