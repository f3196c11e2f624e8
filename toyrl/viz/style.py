"""Figure styles: the one place that sets how large a toyrl figure's text and image are.

Two styles (``STYLES``): ``"notebook"``, the default (a 10 pt base font, figures at the size their function
chooses), and ``"slides"``, for a room reading a projector (a 16 pt base font, figures 1.25x larger, and the
image at least 1600 px wide). Every text role is a fixed fraction of the base font (``ROLES``: an axes title
1.0, an axis label 0.9, a tick label 0.8, text inside a heatmap or token cell 0.9, ...); the plotting functions
ask ``font_size(role)``, and ``rc`` sets matplotlib's own defaults from the same table, so one number moves
every label.

    with figure_style("slides"):                          # every figure made inside: slides text and size
        fig = plot_flat_vs_turns(ro, 0, core)
    fig = credit_panel(style="slides")                    # the same for one call (a function wrapped in @styled)
    fig.savefig("credit.png")                             # >= 1600 px wide, the 16 pt text 22 px tall

A figure stored in the repository is saved with ``png_bytes``: at most 256 colours in a palette PNG, about a
third of the bytes of matplotlib's RGBA (a 1600 px figure has ~8x the pixels of a 600 px one, and its antialiased
edges thousands of distinct colours), with no visible change at these sizes.

A style is a set of rcParams (``rc``), a figure-size scale (``figsize``) and a minimum width in pixels
(``figure_dpi``: the dpi a figure of a given width is made at to reach it; ``subplots`` makes figures with it). The active style lives in a context variable, set only
by ``figure_style``; with no ``figure_style`` around, it is ``"notebook"``.
"""
from __future__ import annotations

import contextvars
import functools
import inspect
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Optional

__all__ = ["FigureStyle", "STYLES", "ROLES", "SLIDE_INCHES", "get_style", "use", "rc", "figure_style", "figsize", "font_size",
           "figure_dpi", "subplots", "styled", "png_bytes", "arm_color", "projected_pt"]


@dataclass(frozen=True)
class FigureStyle:
    """How large a figure's text and image are."""

    name: str
    """the style's name, the value of a ``style=`` argument"""
    font_size: float
    """base font size (pt): titles, labels, ticks and legends are sized relative to it"""
    scale: float = 1.0
    """every figure size a plotting function asks for (``figsize``) is multiplied by this"""
    min_width_px: int = 0
    """``figure_dpi`` raises a figure's dpi until it is at least this many pixels wide (0: matplotlib's dpi)"""
    linewidth: float = 1.5
    """default line width (pt)"""


STYLES = {"notebook": FigureStyle("notebook", font_size=10.0),
          "slides": FigureStyle("slides", font_size=16.0, scale=1.25, min_width_px=1600, linewidth=2.4)}
"""name -> FigureStyle: ``notebook`` (the default) and ``slides``"""

ROLES = {"suptitle": 1.1, "title": 1.0, "label": 0.9, "tick": 0.8, "legend": 0.8, "cell": 0.9, "note": 0.8}
"""text role -> its size as a fraction of the base font (notebook: titles 10 pt, cells 9 pt, ticks 8 pt)"""

SLIDE_INCHES = (13.333, 7.5)
"""a 16:9 slide (inches): a figure is judged by how large its text is once scaled to fit one (``projected_pt``)"""

_ACTIVE = contextvars.ContextVar("toyrl_figure_style", default=None)
_DEFAULT = {"name": "notebook"}
"""the style outside any ``figure_style`` block: ``"notebook"`` until ``use`` changes it"""


def get_style(style: Optional[str] = None) -> FigureStyle:
    """The FigureStyle named ``style`` (None: the active one, ``"notebook"`` outside any ``figure_style``).

    Example: get_style("slides").font_size -> 16.0. An unknown name raises ValueError naming the styles.
    """
    name = (_ACTIVE.get() or _DEFAULT["name"]) if style is None else style
    if name not in STYLES:
        raise ValueError(f"style must be one of {', '.join(map(repr, STYLES))}, got {style!r}")
    return STYLES[name]


def use(style: str) -> FigureStyle:
    """Make ``style`` the default for every figure from now on (a lesson's first cell: ``use("slides")``):
    the style ``get_style()`` falls back to outside a ``figure_style`` block, and matplotlib's own rcParams.

    A plain module setting, not a context variable, so it holds across a Jupyter kernel's cells.
    Example: use("slides"); get_style().font_size -> 16.0.
    """
    import matplotlib.pyplot as plt
    s = get_style(style)
    _DEFAULT["name"] = s.name
    plt.rcParams.update(rc(s.name))
    return s


def rc(style: Optional[str] = None) -> dict:
    """The rcParams of a style: the base font, matplotlib's text roles sized by ``ROLES``, the line width.

    Example: rc("slides")["font.size"] -> 16.0; rc("slides")["axes.labelsize"] -> 14.4 (0.9 x 16).
    """
    s = get_style(style)
    f = {role: k * s.font_size for role, k in ROLES.items()}
    return {"font.size": s.font_size, "axes.titlesize": f["title"], "axes.labelsize": f["label"],
            "xtick.labelsize": f["tick"], "ytick.labelsize": f["tick"], "legend.fontsize": f["legend"],
            "legend.title_fontsize": f["legend"], "figure.titlesize": f["suptitle"], "lines.linewidth": s.linewidth,
            "savefig.dpi": "figure"}


@contextmanager
def figure_style(style: Optional[str] = None):
    """Make every figure inside the block in ``style`` (None: keep the active one); yields the FigureStyle.

        with figure_style("slides"):
            fig = credit_panel()
    """
    import matplotlib.pyplot as plt
    s = get_style(style)
    token = _ACTIVE.set(s.name)
    try:
        with plt.rc_context(rc(s.name)):
            yield s
    finally:
        _ACTIVE.reset(token)


def figsize(width: float, height: float) -> tuple[float, float]:
    """A plotting function's figure size (inches) in the active style: both times its ``scale``.

    Example: figsize(8, 3) -> (8, 3) in "notebook", (10, 3.75) in "slides".
    """
    k = get_style().scale
    return width * k, height * k


def font_size(role: str = "title") -> float:
    """The size (pt) of a text role (a ``ROLES`` key) in the active style.

    Example: font_size("cell") -> 9.0 in "notebook", 14.4 in "slides"; font_size("tick") -> 8.0, 12.8.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(map(repr, ROLES))}, got {role!r}")
    return ROLES[role] * get_style().font_size


def figure_dpi(width: float) -> float:
    """The dpi to make a ``width``-inch figure at in the active style: matplotlib's ``figure.dpi``, raised so
    the figure (a saved PNG, the notebook's image) is at least the style's ``min_width_px`` wide.

    Example (figure.dpi 100): figure_dpi(10) -> 100 in "notebook", 160 in "slides" (1600 px).
    """
    import matplotlib as mpl
    need = get_style().min_width_px
    base = float(mpl.rcParams["figure.dpi"])
    return max(base, math.ceil(need / width)) if need else base


def subplots(nrows: int = 1, ncols: int = 1, *, size: tuple, **kw):
    """``plt.subplots`` with a figure of ``size`` inches (already in the style: pass ``figsize(w, h)`` to
    scale a base size) made at ``figure_dpi``; returns (fig, axes) as plt.subplots does."""
    import matplotlib.pyplot as plt
    return plt.subplots(nrows, ncols, figsize=size, dpi=figure_dpi(size[0]), **kw)


def styled(fn: Callable) -> Callable:
    """Give a plotting function a keyword-only ``style`` argument: the call runs inside ``figure_style(style)``
    (None: the active style), so the figures it makes (``subplots``) take the style's text, size and dpi.

        @styled
        def plot_thing(data, *, title=""): ...
        plot_thing(data, style="slides")
    """
    @functools.wraps(fn)
    def wrapper(*args, style: Optional[str] = None, **kwargs):
        with figure_style(style):
            return fn(*args, **kwargs)

    sig = inspect.signature(fn)
    extra = inspect.Parameter("style", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="Optional[str]")
    params = list(sig.parameters.values())
    cut = next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD), len(params))
    wrapper.__signature__ = sig.replace(parameters=params[:cut] + [extra] + params[cut:])
    return wrapper


def png_bytes(fig, colors: int = 256) -> bytes:
    """The PNG bytes of ``fig`` in a palette of at most ``colors`` colours (Pillow's maximum-coverage quantizer,
    no dithering, so flat areas stay flat), saved with ``optimize``; an opaque figure is quantized as RGB, one
    with any transparency as RGBA.

    Example: a 1605 x 615 px claim figure (env_mask) -> 53 kB, against 164 kB as matplotlib's RGBA; the same
    pixel size, each pixel within 5 of its colour per channel (of 255).
    """
    import io
    from PIL import Image
    if not 2 <= colors <= 256:
        raise ValueError(f"colors must be an integer in [2, 256], got {colors!r}")
    raw = io.BytesIO()
    fig.savefig(raw, format="png")
    im = Image.open(raw)
    im = im.convert("RGB") if im.mode == "RGBA" and im.getchannel("A").getextrema() == (255, 255) else im
    pal = im.quantize(colors, method=Image.Quantize.MAXCOVERAGE, dither=Image.Dither.NONE)
    out = io.BytesIO()
    pal.save(out, format="png", optimize=True)
    return out.getvalue()


ARM_COLORS = {"grpo": "#1f77b4", "gigpo": "#d62728", "rloo": "#2ca02c", "reinforce_pp": "#9467bd", "dr_grpo": "#8c564b",
              "gae": "#ff7f0e", "turn_gae": "#ff7f0e", "turn_ppo": "#e377c2", "ppo": "#7f7f7f", "clip_higher": "#bcbd22",
              "gspo": "#17becf", "cispo": "#aec7e8", "sapo": "#98df8a", "exact": "#2ca02c", "none": "#7f7f7f",
              "kl": "#393b79", "skip_zero_adv": "#637939", "starpo_s": "#843c39", "entropy": "#8c6d31",
              "critic": "#e7298a"}
"""arm name -> its colour in every figure (an arm keeps its colour across a lesson, whatever else is drawn)"""

_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#393b79")
"""the colours an unlisted arm is hashed to (no grey: grey is kept for reference arms such as "none")"""


def arm_color(arm: str) -> str:
    """The fixed colour of an arm: ``ARM_COLORS`` for a known name, else one of ten colours (``_PALETTE``) chosen by a stable hash
    of the name (the same in every process and figure, unlike matplotlib's colour cycle, which follows draw order).

    Example: arm_color("grpo") -> "#1f77b4"; arm_color("my_arm") is the same string in every call.
    """
    if arm in ARM_COLORS:
        return ARM_COLORS[arm]
    import zlib
    return _PALETTE[zlib.crc32(str(arm).encode()) % len(_PALETTE)]


def projected_pt(fig, size_pt: float) -> float:
    """The size (pt) that text of ``size_pt`` has once ``fig`` is scaled to fill a 16:9 slide (``SLIDE_INCHES``),
    the size a room reads it at: larger for a figure smaller than the slide, smaller for a larger one.

    Example: a 10 x 4 in figure scales by 13.333 / 10, so its 12 pt ticks project at 16 pt.
    """
    w, h = fig.get_size_inches()
    return size_pt * min(SLIDE_INCHES[0] / w, SLIDE_INCHES[1] / h)
