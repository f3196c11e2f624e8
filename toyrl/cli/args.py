"""Command-line flags generated from a config dataclass (CleanRL's ``Args`` idea, with argparse).

Every field becomes ``--field-name`` (underscores -> dashes); its help is the field's docstring
(the string literal after it in the class body) and its default the dataclass default:

    p = argparse.ArgumentParser()
    add_fields(p, TrainConfig)
    cfg = TrainConfig(**values(p.parse_args(["--ppo-epochs", "2", "--env-kwargs", "map_name=4x4"]), TrainConfig))

Value syntax by field type:
    int, float, str   one token (``--lr 1e-3``); given twice, the last one wins
    bool              ``--x`` / ``--no-x`` (or ``--x false``)
    Optional[...]     also the token ``none``
    list              comma-separated and/or repeated: ``--filters a,b`` = ``--filters a b`` = ``--filters a --filters b``
    dict              a JSON object and/or KEY=VALUE tokens (VALUE is JSON, else a string; ``a.b=1`` sets a nested
                      key); repeated flags merge, later keys win
With ``multi=True`` (``toyrl sweep``) every flag takes several values and ``grid`` runs their product: a scalar
or a list takes one value per token (a list as one comma-separated token, ``none`` = empty), a dict one value
per KEY=VALUE of the same key (``--estimator-kwargs gamma=0.9 gamma=1`` gives two dicts).
A field type with no syntax here raises TypeError when the flags are built, so no field is skipped silently.
``field_error`` turns a config's ``ValueError`` into a one-line ``UsageError`` naming the field's flag, and
``AtLeast`` gives a hand-written int flag a lower bound (``add_argument("--steps", action=AtLeast, minimum=1)``).
An env, estimator or clip name no registry holds is looked up in the installed plug-ins (``toyrl.plugins``) first.
"""
from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import inspect
import itertools
import json
import re
import textwrap
import types
import typing
from dataclasses import dataclass

__all__ = ["UsageError", "choose", "Spec", "field_docs", "specs", "add_fields", "values", "grid", "check_names", "to_argv",
           "field_error", "AtLeast"]

TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
SCALARS = (int, float, str)


class UsageError(Exception):
    """A bad name or value: reported in one line, exit code 2."""


def choose(kind: str, name: str, valid) -> str:
    """Return ``name`` if it is one of ``valid``, else raise a one-line UsageError listing them
    (``choose("env", "nope", ["gridworld"])`` -> "unknown env 'nope'; valid envs: gridworld")."""
    valid = list(valid)
    if name not in valid:
        raise UsageError(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(valid)}")
    return name


class AtLeast(argparse.Action):
    """An int flag with a lower bound ``minimum``: a smaller value is a one-line UsageError, exit 2
    (``toyrl demo --steps 0`` -> "--steps: must be >= 1, got 0")."""

    def __init__(self, *args, minimum: int = 1, **kw):
        kw.setdefault("type", int)
        super().__init__(*args, **kw)
        self.minimum = minimum
        if self.help:
            self.help += f" (>= {minimum})"

    def __call__(self, parser, namespace, value, option_string=None):
        if value < self.minimum:
            raise UsageError(f"{option_string}: must be >= {self.minimum}, got {value}")
        setattr(namespace, self.dest, value)


class Given(list):
    """The raw tokens of a flag that was given (a plain value in the namespace is an untouched default)."""


@dataclass(frozen=True)
class Spec:
    """How one field reads from the command line."""
    name: str
    flag: str
    kind: str                     # bool | scalar | list | dict
    item: type                    # type of the value (scalar) or of one item (list)
    optional: bool                # Optional[...]: the token "none" is None
    default: object
    container: type = list        # list or tuple
    choices: tuple = ()           # the values of a Literal[...]


def field_docs(cls) -> dict:
    """Field name -> its docstring (whitespace collapsed), read with ``ast`` from the class source (and bases')."""
    docs = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        try:
            body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        except (OSError, TypeError):                    # no source (e.g. dataclasses.make_dataclass): no docs
            continue
        for node, nxt in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"field {f.name!r} has no default; a generated flag needs one")


def spec_of(name: str, tp, default) -> Spec:
    """The Spec of one field from its resolved type; TypeError if the type has no command-line syntax."""
    flag, optional, whole = "--" + name.replace("_", "-"), False, tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        optional, tp = True, (rest[0] if len(rest) == 1 else None)
    origin, args = typing.get_origin(tp) or tp, typing.get_args(tp)
    if tp is bool:
        return Spec(name, flag, "bool", bool, optional, default)
    if tp in SCALARS:
        return Spec(name, flag, "scalar", tp, optional, default)
    if origin is typing.Literal and all(isinstance(a, str) for a in args):
        return Spec(name, flag, "scalar", str, optional, default, choices=args)
    if origin in (list, tuple):
        item = args[0] if args else str
        homogeneous = origin is list or not args or (len(args) == 2 and args[1] is Ellipsis)
        if homogeneous and item in SCALARS:
            return Spec(name, flag, "list", item, optional, default, container=origin)
    if origin is dict and (not args or args[0] is str):
        return Spec(name, flag, "dict", dict, optional, default)
    raise TypeError(f"field {name!r}: type {whole!r} has no command-line syntax in toyrl.cli.args "
                    "(int, float, str, bool, Literal, Optional, list, tuple[X, ...], dict)")


def specs(cls) -> list:
    """One Spec per init field of the dataclass ``cls``, in declaration order."""
    hints = typing.get_type_hints(cls)
    return [spec_of(f.name, hints[f.name], _default(f)) for f in dataclasses.fields(cls) if f.init]


class _Tokens(argparse.Action):
    """Collect every token of every occurrence; a bare bool flag adds "true", its ``--no-`` form "false"."""

    def __init__(self, *args, negative=None, **kw):
        super().__init__(*args, **kw)
        self.negative = negative

    def __call__(self, parser, namespace, tokens, option_string=None):
        got = getattr(namespace, self.dest, None)
        got = got if isinstance(got, Given) else Given()
        if option_string == self.negative:
            if tokens:
                raise argparse.ArgumentError(self, f"{option_string} takes no value")
            tokens = ["false"]
        elif tokens in (None, []):                                   # bare --x of a bool
            tokens = ["true"]
        got.extend([tokens] if isinstance(tokens, str) else tokens)
        setattr(namespace, self.dest, got)


def _show(v) -> str:
    """A value as one command-line token: JSON for a container, ``none`` / ``true`` / ``false``."""
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(list(v) if isinstance(v, tuple) else v)
    return str(v).lower() if v is None or isinstance(v, bool) else str(v)


def add_fields(p: argparse.ArgumentParser, cls, *, multi: bool = False, aliases=None, defaults=None,
               names=None) -> None:
    """Add a flag per field of ``cls`` to ``p``: help from the docstring, default from the dataclass
    (``defaults`` overrides some, as lists of values when ``multi``), extra option strings from ``aliases``
    (field -> ["--short"]), and the valid names of ``names`` (field -> (what, registry)) in the help."""
    fields = specs(cls)                                 # first: a type with no syntax fails before anything else
    docs, aliases, defaults, names = field_docs(cls), aliases or {}, defaults or {}, names or {}
    for s in fields:
        default = defaults.get(s.name, [s.default] if multi else s.default)
        valid = f"; valid: {', '.join(map(str, names[s.name][1]))}" if s.name in names else ""
        shown = " ".join(map(_show, default)) if multi else _show(default)
        text = f"{docs.get(s.name, '')}{valid} (default: {shown})".replace("%", "%%")
        metavar = {"bool": "BOOL", "list": "A,B", "dict": "KEY=VALUE"}.get(s.kind, s.item.__name__.upper())
        nargs = {"bool": "*" if multi else "?", "scalar": "+" if multi else None}.get(s.kind, "+")
        negative = "--no-" + s.flag[2:] if s.kind == "bool" else None
        p.add_argument(s.flag, *([negative] if negative else []), *aliases.get(s.name, ()), dest=s.name,
                       action=_Tokens, negative=negative, nargs=nargs, default=default,
                       metavar=metavar + ("|none" if s.optional else ""), help=text)


def _one(s: Spec, tok: str):
    """One token -> one value of the field."""
    if s.optional and tok.lower() == "none":
        return None
    if s.kind == "bool":
        if tok.lower() not in TRUE + FALSE:
            raise ValueError(f"expected true or false, got {tok!r}")
        return tok.lower() in TRUE
    if s.kind == "list":
        return _list(s, [tok])
    if s.choices and tok not in s.choices:
        raise ValueError(f"unknown value {tok!r}; valid: {', '.join(s.choices)}")
    try:
        return s.item(tok)
    except ValueError:
        raise ValueError(f"expected {s.item.__name__}, got {tok!r}") from None


def _list(s: Spec, tokens):
    """Tokens of a list field -> the list: "a,b", JSON "[...]", "none" (empty)."""
    if s.optional and [t.lower() for t in tokens] == ["none"]:
        return None
    items = []
    for tok in tokens:
        items += json.loads(tok) if tok.startswith("[") else [] if tok.lower() == "none" else tok.split(",")
    return s.container(s.item(x) for x in items if not (isinstance(x, str) and x.strip() == ""))


def _assignments(tokens) -> list:
    """Tokens of a dict field -> [(key path, value)]: '{"a": 1}' -> [(("a",), 1)], "a.b=x" -> [(("a", "b"), "x")]."""
    out = []
    for tok in tokens:
        if tok.lstrip().startswith("{"):
            obj = json.loads(tok)
            out += [((k,), v) for k, v in obj.items()]
        elif "=" in tok:
            key, text = tok.split("=", 1)
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                value = text
            out.append((tuple(key.split(".")), value))
        else:
            raise ValueError(f"takes KEY=VALUE or a JSON object, got {tok!r}")
    return out


def _nest(pairs) -> dict:
    """[(("a", "b"), 1), (("c",), 2)] -> {"a": {"b": 1}, "c": 2} (later pairs win)."""
    out = {}
    for path, value in pairs:
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"{'.'.join(path)}: {key!r} already holds a non-dict value")
        node[path[-1]] = value
    return out


def _dicts(s: Spec, tokens, multi: bool) -> list:
    """Tokens of a dict field -> its values: one merged dict, or (``multi``) one per combination of a
    key's values."""
    alts = [None] if s.optional and any(t.lower() == "none" for t in tokens) else []
    pairs = _assignments([t for t in tokens if not (s.optional and t.lower() == "none")])
    if not multi:
        return alts or [_nest(pairs)]
    by_key = {}
    for path, value in pairs:
        by_key.setdefault(path, []).append(value)
    if pairs or not alts:
        alts += [_nest(zip(by_key, combo)) for combo in itertools.product(*by_key.values())]
    return alts


def convert(s: Spec, tokens, multi: bool = False):
    """The raw tokens of a flag -> the field's value (``multi``: the list of its values)."""
    try:
        if s.kind == "dict":
            alts = _dicts(s, tokens, multi)
        elif s.kind == "list" and not multi:
            alts = [_list(s, tokens)]
        else:
            alts = [_one(s, t) for t in (tokens if multi else tokens[-1:])]
    except (ValueError, TypeError) as e:                       # JSONDecodeError is a ValueError
        raise UsageError(f"{s.flag}: {e}") from None
    return alts if multi else alts[0]


def values(ns: argparse.Namespace, cls, multi: bool = False) -> dict:
    """Field name -> value from parsed flags (``multi``: -> the list of values to sweep)."""
    out = {}
    for s in specs(cls):
        got = getattr(ns, s.name)
        out[s.name] = convert(s, got, multi) if isinstance(got, Given) else copy.deepcopy(got)
    return out


def grid(alternatives: dict) -> list:
    """{"a": [1, 2], "b": [3]} -> [{"a": 1, "b": 3}, {"a": 2, "b": 3}]: the product of every field's values."""
    keys = list(alternatives)
    return [dict(zip(keys, combo)) for combo in itertools.product(*alternatives.values())]


def _names_in(value) -> list:
    """The names a value holds: a str itself, a list its items, a dict its keys, None none."""
    return [] if value is None else list(value) if isinstance(value, (list, tuple, dict)) else [value]


PLUGIN_FIELDS = ("env", "estimator", "clip")
"""config fields whose names a plug-in can add (``toyrl.plugins``)"""


def check_names(v: dict, names: dict, multi: bool = False) -> None:
    """UsageError naming the flag and the valid names if a value is not in its registry.

    ``names``: field -> (what the names are, registry[, is_valid]); ``is_valid`` replaces membership
    (for patterns such as ``hf:PATH``). ``multi``: ``v`` holds lists of values. A name of ``PLUGIN_FIELDS`` is
    looked up in the installed entry points before it is refused, and the refusal says how to add one."""
    for field, (what, registry, *ok) in names.items():
        is_valid = ok[0] if ok else registry.__contains__
        for value in (v[field] if multi else [v[field]]):
            bad = [name for name in _names_in(value) if not is_valid(name)]
            if bad and field in PLUGIN_FIELDS:
                from ..plugins import hint, load_entry_points
                load_entry_points()
                bad, how = [name for name in bad if not is_valid(name)], f"; {hint(field, cli=True)}"
            if bad:
                raise UsageError(f"--{field.replace('_', '-')}: unknown {what} {bad[0]!r}; valid {what}s: "
                                 f"{', '.join(map(str, registry))}{how if field in PLUGIN_FIELDS else ''}")


def to_argv(cfg) -> list:
    """The flags that rebuild ``cfg`` from defaults (fields that differ from them only)."""
    argv = []
    for s in specs(type(cfg)):
        v = getattr(cfg, s.name)
        if v == s.default:
            continue
        if s.kind == "bool" and v is not None:
            argv.append(s.flag if v else "--no-" + s.flag[2:])
        else:
            argv += [s.flag, _show(v)]
    return argv


def field_error(e: ValueError, fields) -> UsageError:
    """A config's ValueError as a UsageError naming the flag of the field its message starts with:
    "lr must be > 0" -> "--lr: lr must be > 0", "env_kwargs: slip ..." -> "--env-kwargs: slip ..."."""
    msg = str(e)
    m = re.match(r"(\w+)(: | )", msg)
    if not m or m.group(1) not in fields:
        return UsageError(msg)
    flag = "--" + m.group(1).replace("_", "-")
    return UsageError(f"{flag}: {msg[m.end():] if m.group(2) == ': ' else msg}")
