"""The env contract: every method, attribute and ``info`` key of a core that the trainer reads, and a check of it.

Dimension legend: N copies (P tasks x G rollouts), H turns.

``CONTRACT`` lists each piece (what it is, who reads it); ``docs/your_env.md`` says the same in prose, with a
complete example env. ``check_env(core_cls)`` runs the contract on an env and names each missing or broken piece
in one line: it builds the core, plays a few random episodes (G rollouts per task, so rows of one group share
their initial state), then one rollout through the toy policy and the real rollout loop, and reports GiGPO's
anchor share on that batch (``segments.anchor_recurrence``: the share of turns taken from a state that recurs
within its group; 0 means GiGPO's step term never acts and GiGPO is GRPO).

    report = check_env(KeyDoorCore)
    print(report.text())        # "ok      sample_tasks ...", "MISSING obs_vocab_size ...", "anchor share 0.61 ..."
    assert report.ok
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..envs.core import VOID, BatchedCore

__all__ = ["Piece", "CONTRACT", "EnvReport", "check_env"]


@dataclass(frozen=True)
class Piece:
    name: str
    """the method, attribute or info key"""
    kind: str
    """method | attribute | info key"""
    required: bool
    """False: read only by the methods or policies named in ``reader``"""
    reader: str
    """who reads it"""
    doc: str
    """what it must be"""


CONTRACT = (
    Piece("__init__", "method", True, "toyrl.envs.make_core", "__init__(num_envs, *, seed=None, **env_kwargs); "
          "calls BatchedCore.__init__(num_envs, seed) and sets n_actions, task_dim, max_turns"),
    Piece("n_actions", "attribute", True, "the codecs, random and expert actions", "int >= 1: actions 0..n-1"),
    Piece("task_dim", "attribute", True, "sample_tasks / reset", "int >= 1: the width of a task row"),
    Piece("max_turns", "attribute", True, "context bound (rollout.play.episode_token_bound), truncation",
          "int >= 1: an episode ends after at most this many turns"),
    Piece("sample_tasks", "method", True, "Trainer.sample", "sample_tasks(rng, n) -> (n, task_dim) int64, drawn "
          "from rng only"),
    Piece("reset", "method", True, "rollout.play.rollout", "reset(tasks (N, task_dim)) sets self.state = "
          "self.episode_state(...) (turn 0, not done)"),
    Piece("step", "method", True, "rollout.play.play_turn", "step(actions (N,) int, VOID = -1 allowed) -> obs, "
          "reward (N,) float, terminated (N,) bool, truncated (N,) bool, info; a done copy does not move and gets "
          "reward 0; self.end_turn(live, terminated) counts the turn"),
    Piece("success", "info key", True, "rollout.play.play_turn (success_rate)", "info['success'] (N,) bool: the "
          "copy solved its task this turn"),
    Piece("state_keys", "method", True, "rollout.play.play_turn (TurnBatch.state_key: GiGPO's anchors)",
          "state_keys() -> (N,) int64, equal for equal states in any process (use mix64, never hash())"),
    Piece("obs_vocab_size", "attribute", True, "codecs.toy.ToyCodec.for_core (toy policies)", "int >= 1: the "
          "observation tokens are 0..obs_vocab_size-1"),
    Piece("prompt_tokens", "method", True, "codecs.toy.ToyCodec.prompt", "prompt_tokens(i) -> list of ints in "
          "[0, obs_vocab_size): what copy i shows at the start"),
    Piece("obs_tokens", "method", True, "codecs.toy.ToyCodec.observe", "obs_tokens(i) -> list of ints in "
          "[0, obs_vocab_size): what copy i shows after a turn"),
    Piece("render_text", "method", False, "codecs.text.TextCodec (tinylm, hf:PATH)", "render_text(i) -> str"),
    Piece("parse_action", "method", False, "codecs.text.TextCodec", "parse_action(text, i) -> int or None (None: a "
          "void turn; never raises)"),
    Piece("action_text", "method", False, "codecs.text.TextCodec, behaviour cloning", "action_text(a, i) -> str "
          "with parse_action(action_text(a, i), i) == a"),
    Piece("found / right / contains_answer", "info key", False, "rollout.play._signal (TurnBatch.turn_signal: "
          "MT-GRPO, the doctor)", "(N,) bool or float: a checkable per-turn signal; the first present is read"),
    Piece("void", "info key", False, "gymnasium wrapper, readers of info", "(N,) bool: the turn was VOID"),
    Piece("privileged", "method", False, "SWEET-RL's privileged critic (needs privileged_critic)",
          "privileged(i) -> {'reference_solution': [actions]}"),
    Piece("answer_action", "method", False, "A2TGPO's information gain (needs info_gain)", "answer_action(i) -> "
          "the action that answers copy i's task"),
    Piece("memo", "method", False, "behaviour cloning with bc_reasoning", "memo(i) -> list of ints the expert "
          "writes as reasoning (what the task asks to remember)"),
)
"""every piece of a core the trainer reads, in the order ``check_env`` checks them"""


@dataclass
class EnvReport:
    """What ``check_env`` found: ``lines`` (one per piece: "ok", "MISSING", "BROKEN", "absent" for an
    optional piece, then the anchor share), ``missing`` (the failing pieces' lines), ``anchor`` (GiGPO's anchor
    statistics on the rollout's batch, empty when it could not run)."""

    env: str
    lines: list = field(default_factory=list)
    missing: list = field(default_factory=list)
    anchor: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no required piece is missing or broken."""
        return not self.missing

    def add(self, piece: str, status: str, text: str) -> None:
        """One line for ``piece``; a piece already missing or broken gets no second line."""
        if status in ("MISSING", "BROKEN", "ok") and self.failed(piece):
            return
        line = f"{status:<8}{piece}: {text}"
        self.lines.append(line)
        if status in ("MISSING", "BROKEN"):
            self.missing.append(line)

    def failed(self, piece: str) -> bool:
        """True when ``piece`` already has a MISSING or BROKEN line."""
        return any(line[8:].startswith(piece + ":") for line in self.missing)

    def text(self) -> str:
        head = f"toyrl check-env: {self.env}"
        verdict = ("verdict: the contract holds" if self.ok
                   else f"verdict: {len(self.missing)} piece(s) missing or broken")
        return "\n".join([head, *self.lines, verdict])


def _pieces() -> dict:
    return {p.name: p for p in CONTRACT}


def _try(report: EnvReport, piece: str, fn, *args):
    """fn(*args), or None with a BROKEN line naming the piece and the error."""
    try:
        return fn(*args)
    except Exception as e:                                    # a user's env: any error is a finding
        report.add(piece, "BROKEN", f"raised {type(e).__name__}: {e}")
        return None


def _static(report: EnvReport, cls, required: bool) -> None:
    """The ``required`` (or the optional) methods ``cls`` does not define (the base's raise NotImplementedError)."""
    P = _pieces()
    for name in ("sample_tasks", "reset", "step", "state_keys", "prompt_tokens", "obs_tokens", "render_text",
                 "parse_action", "action_text", "privileged", "answer_action", "memo"):
        own = getattr(cls, name, None)
        if P[name].required == required and (own is None or own is getattr(BatchedCore, name, object())):
            report.add(name, "MISSING" if required else "absent", f"({P[name].kind}) {P[name].doc}; read by "
                       f"{P[name].reader}")


def _attributes(report: EnvReport, core) -> set:
    """The attributes of ``CONTRACT`` that ``core`` lacks or holds no int >= 1 in -> their names."""
    P, bad = _pieces(), set()
    for name in ("n_actions", "task_dim", "max_turns", "obs_vocab_size"):
        v = _try(report, name, getattr, core, name, None)
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            what = "not set" if v is None else f"is {v!r}"
            report.add(name, "MISSING" if v is None else "BROKEN",
                       f"({P[name].kind}) {what}: must be {P[name].doc}; read by {P[name].reader}")
            bad.add(name)
        else:
            report.add(name, "ok", f"{int(v)}")
    return bad


def _episodes(report: EnvReport, core, P: int, G: int, seed: int) -> Optional[np.ndarray]:
    """Random episodes on core (P tasks x G copies) checking reset, step, info and state keys; the tasks."""
    rng = np.random.default_rng(seed)
    tasks = _try(report, "sample_tasks", core.sample_tasks, rng, P)
    if tasks is None:
        return None
    tasks = np.asarray(tasks)
    if tasks.shape != (P, core.task_dim) or not np.issubdtype(tasks.dtype, np.integer):
        report.add("sample_tasks", "BROKEN", f"returned {tasks.dtype} {tasks.shape}, expected int64 ({P}, "
                   f"task_dim={core.task_dim})")
        return None
    report.add("sample_tasks", "ok", f"({P}, {core.task_dim}) {tasks.dtype}")
    tasks = np.repeat(tasks, G, 0)
    if _try(report, "reset", core.reset, tasks) is None and not core.state:
        return None
    if "done" not in core.state or "turn" not in core.state:
        report.add("reset", "BROKEN", "self.state has no 'turn' / 'done': build it with self.episode_state(...)")
        return None
    report.add("reset", "ok", "state from episode_state")
    keys0 = _try(report, "state_keys", core.state_keys)
    if keys0 is not None:
        keys0 = np.asarray(keys0)
        if keys0.shape != (core.num_envs,) or keys0.dtype != np.int64:
            report.add("state_keys", "BROKEN", f"returned {keys0.dtype} {keys0.shape}, expected int64 ({core.num_envs},)")
        elif not (keys0.reshape(P, G) == keys0.reshape(P, G)[:, :1]).all():
            report.add("state_keys", "BROKEN", "copies reset on one task got different keys: keys must depend on "
                       "the state only")
        else:
            report.add("state_keys", "ok", "int64, equal for the copies of one task")
    _steps(report, core, rng)
    return tasks


def _steps(report: EnvReport, core, rng) -> None:
    """Step random actions (a VOID now and then) until every copy is done, checking what step returns."""
    N, success_seen, signal = core.num_envs, False, None
    for t in range(int(core.max_turns) + 1):
        if core.done.all():
            break
        a = rng.integers(0, core.n_actions, N)
        a[rng.random(N) < 0.1] = VOID
        was_done = core.done.copy()
        out = _try(report, "step", core.step, a)
        if out is None:
            return
        if not (isinstance(out, tuple) and len(out) == 5 and isinstance(out[4], dict)):
            report.add("step", "BROKEN", "must return (obs, reward, terminated, truncated, info)")
            return
        _, r, term, trunc, info = out
        r = np.asarray(r, dtype=float)
        if r.shape != (N,) or not np.isfinite(r).all() or np.any(r[was_done] != 0):
            report.add("step", "BROKEN", "reward must be (N,) finite, 0 for copies already done")
            return
        if "success" not in info:
            report.add("success", "MISSING", f"(info key) step's info has no 'success' (keys: {sorted(info)}); "
                       "read by rollout.play.play_turn")
            return
        success_seen = True
        signal = signal or next((k for k in ("contains_answer", "found", "right") if k in info), None)
    if not core.done.all():
        report.add("max_turns", "BROKEN", f"copies still not done after max_turns={core.max_turns} turns: step "
                   "must call self.end_turn(live, terminated)")
        return
    report.add("step", "ok", "5-tuple, done copies get reward 0, every episode ends within max_turns")
    if success_seen:
        report.add("success", "ok", "in info")
    report.add("found / right / contains_answer", "ok" if signal else "absent",
               f"info[{signal!r}] is the per-turn signal" if signal else
               "no per-turn signal: TurnBatch.turn_signal stays 0 (MT-GRPO falls back to the turn rewards)")


def _tokens(report: EnvReport, core) -> bool:
    V = core.obs_vocab_size
    for name in ("prompt_tokens", "obs_tokens"):
        toks = _try(report, name, lambda: [list(getattr(core, name)(i)) for i in range(core.num_envs)])
        if toks is None:
            return False
        flat = [t for row in toks for t in row]
        if any(not isinstance(t, (int, np.integer)) or not 0 <= t < V for t in flat):
            report.add(name, "BROKEN", f"tokens must be ints in [0, obs_vocab_size={V}), got e.g. {toks[0][:6]}")
            return False
        report.add(name, "ok", f"ints in [0, {V})")
    return True


def _text(report: EnvReport, core) -> None:
    if type(core).parse_action is BatchedCore.parse_action or type(core).action_text is BatchedCore.action_text:
        return
    bad = [a for a in range(core.n_actions) if _try(report, "parse_action", core.parse_action,
                                                    core.action_text(a, 0), 0) != a]
    if bad:
        report.add("action_text", "BROKEN", f"parse_action(action_text(a)) != a for a in {bad[:5]}")
    else:
        report.add("parse_action", "ok", "reads back every action_text; text policies can play")


def check_env(core_cls, env_kwargs: Optional[dict] = None, *, tasks: int = 4, group_size: int = 4,
              seed: int = 0) -> EnvReport:
    """Run the contract (``CONTRACT``) on ``core_cls`` built with ``env_kwargs``: ``tasks`` x ``group_size``
    random episodes, then one rollout of the toy policy through ``rollout.play.rollout`` -> an ``EnvReport``
    naming each missing or broken piece in one line, with GiGPO's anchor share on the rollout's batch.
    ValueError for sizes below 1. Example: check_env(BanditCore).ok -> True; its anchor share is about 0.9
    (every stage recurs within a group)."""
    if tasks < 1 or group_size < 1:
        raise ValueError(f"tasks and group_size must be >= 1, got {tasks} and {group_size}")
    report = EnvReport(getattr(core_cls, "__qualname__", repr(core_cls)))
    if not (isinstance(core_cls, type) and issubclass(core_cls, BatchedCore)):
        report.add("BatchedCore", "MISSING", f"{core_cls!r} is not a subclass of toyrl.envs.BatchedCore")
        return report
    _static(report, core_cls, required=True)
    core = _try(report, "__init__", lambda: core_cls(tasks * group_size, seed=seed, **(env_kwargs or {})))
    bad = _attributes(report, core) if core is not None else {"n_actions"}
    played = not bad & {"n_actions", "task_dim", "max_turns"} and _episodes(report, core, tasks, group_size,
                                                                           seed) is not None
    tokens = played and "obs_vocab_size" not in bad and _tokens(report, core)
    if played:
        _text(report, core)
    _static(report, core_cls, required=False)
    if tokens and not report.missing:                                      # last: the anchor share
        _anchor(report, core, tasks, group_size, seed)
    return report


def _anchor(report: EnvReport, core, P: int, G: int, seed: int) -> None:
    """One rollout of a random tiny toy policy (the trainer's own loop) and its GiGPO anchor statistics."""
    import torch
    from ..codecs.toy import ToyCodec
    from ..policies import make_policy
    from ..segments import anchor_recurrence
    from .play import episode_token_bound, rollout
    codec = ToyCodec.for_core(core)
    policy = make_policy("tiny", codec.size, seed=seed, max_len=max(192, episode_token_bound(core, codec)))
    tasks = np.repeat(core.sample_tasks(np.random.default_rng(seed), P), G, 0)
    ro = _try(report, "rollout", lambda: rollout(policy, core, tasks, np.repeat(np.arange(P), G), codec=codec,
                                                 generator=torch.Generator().manual_seed(seed)))
    if ro is None:
        return
    b = ro.batch
    report.anchor = anchor_recurrence(b.group, b.state_key, b.turn_mask)
    share = report.anchor["anchor_share"]
    what = ("no state recurs within a group: GiGPO's step term is 0 and GiGPO equals GRPO here" if share == 0 else
            "of turns come from a state that recurs within its group (GiGPO's step term reaches them)")
    report.lines.append(f"{'anchor':<8}share {share:.2f} {what}; {int(b.turn_mask.sum())} turns of {P} groups x "
                        f"{G} random episodes, {report.anchor['anchor_group_mean']:.2f} turns per anchor state")
