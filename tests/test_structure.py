"""The shape of the code a learner reads, checked from the source with ``ast``.

- no function or method in toyrl/ over 60 lines, its docstring excluded;
- no import cycle among toyrl modules, imports inside functions included (the failure shows the cycle's path);
- the layering: every import points down the list of rooms (``LAYERS``), imports inside functions included;
- ``import toyrl`` pulls in no lab or front-end module (trainer, CLI, ledger, viz);
- every test function in tests/ checks a value: an ``assert``, ``pytest.raises`` / ``pytest.warns``,
  or a call to a helper named ``assert_*`` / ``check_*`` (``np.testing.assert_allclose`` counts).

Each test lists every offender in its failure message, so one run says what is left to fix.
"""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "toyrl"
TESTS = ROOT / "tests"

MAX_FUNCTION_LINES = 60


def module_name(path: Path) -> str:
    """Dotted name of a file under the repository root: toyrl/credit/gae.py -> toyrl.credit.gae."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def package_files() -> list:
    return sorted(PACKAGE.rglob("*.py"))


# ---- (b) function length ----------------------------------------------------------------------------
def function_lengths(tree: ast.Module) -> list:
    """(qualified name, first line, length) of every function and method, nested ones included.

    Length counts the lines from ``def`` to the last line of the body, minus the docstring's lines.
    """
    out = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = child.end_lineno - child.lineno + 1
                body0 = child.body[0]
                if isinstance(body0, ast.Expr) and isinstance(body0.value, ast.Constant) \
                        and isinstance(body0.value.value, str):
                    n -= body0.end_lineno - body0.lineno + 1
                out.append((prefix + child.name, child.lineno, n))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def test_function_lengths_example():
    src = ('def f(x):\n    """Doc\n    on two lines."""\n    y = x\n    return y\n\n'
           'class C:\n    def m(self):\n        pass\n')
    assert function_lengths(ast.parse(src)) == [("f", 1, 3), ("C.m", 8, 2)]


def test_no_function_over_60_lines():
    over = [f"{p.relative_to(ROOT)}:{line} {name} ({n} lines)"
            for p in package_files() for name, line, n in function_lengths(parse(p)) if n > MAX_FUNCTION_LINES]
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (docstring excluded):\n" + "\n".join(over)


# ---- (c) import cycles ------------------------------------------------------------------------------
def imported_modules(tree: ast.Module, name: str, is_package: bool, known: set) -> dict:
    """{toyrl module: (line, inside_function)} of every import in ``name``'s source, wherever it stands:
    at module level, in an ``if`` / ``try`` block, a class body, or a function or lambda body.

    An import inside a function runs later than the module's own, so it does not fail at import time,
    but it is still an arrow from ``name`` to that module, and DESIGN.md's arrows point one way; a cycle
    that only closes inside a function is a cycle of the design all the same. Where a module is imported
    more than once, the entry kept is the first module-level import, else the first import in a function.

    ``from x import y`` is an edge to ``x.y`` where that is a module, else to ``x`` (it reads the name ``y``
    from ``x``); an import of ``a.b`` is an edge to ``a.b`` only (a package that imports its own modules
    is not a cycle).
    """
    base = name.split(".") if is_package else name.split(".")[:-1]
    found: dict = {}

    def add(mod, line, inside):
        if mod in known and mod != name:
            found[mod] = min(found.get(mod, (inside, line)), (inside, line))

    def visit(node, inside):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for a in child.names:
                    add(a.name, child.lineno, inside)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    pkg = base[:len(base) - child.level + 1]
                    mod = ".".join(pkg + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                subs = {f"{mod}.{a.name}" for a in child.names} & known
                for s in subs:
                    add(s, child.lineno, inside)
                if len(subs) < len(child.names):
                    add(mod, child.lineno, inside)
            visit(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return {m: (line, inside) for m, (inside, line) in found.items()}


def import_graph(files) -> dict:
    """{module: {imported toyrl module: (line, inside_function)}} over ``files``."""
    names = {module_name(p): p for p in files}
    known = set(names)
    return {n: imported_modules(parse(p), n, p.name == "__init__.py", known) for n, p in names.items()}


def find_cycles(graph: dict) -> list:
    """The strongly connected components with more than one module (or a self-import), sorted (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(out)


def cycle_path(graph: dict, component: list) -> list:
    """A shortest closed path [m0, m1, ..., m0] through the first module of a strongly connected
    ``component`` (breadth-first over the component's edges, neighbours in sorted order)."""
    start, inside = component[0], set(component)
    prev, frontier = {}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(set(graph.get(v, ())) & inside):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return path[::-1] + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    raise ValueError(f"component: {component} holds no cycle through {start!r}")


def describe_cycle(graph: dict, path: list) -> str:
    """One line per arrow of ``path``: where the import stands (line, and whether inside a function)."""
    lines = [path[0]]
    for a, b in zip(path, path[1:]):
        line, inside = graph[a][b] if isinstance(graph[a], dict) else (None, False)
        where = f"{a} line {line}" + (", inside a function" if inside else "") if line else a
        lines.append(f"  -> {b}   ({where})")
    return "\n".join(lines)


def test_find_cycles_example():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_cycle_path_example():
    graph = {"a": {"d", "b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"b"}}
    (comp,) = find_cycles(graph)
    assert comp == ["a", "b", "c", "d", "e"]
    assert cycle_path(graph, comp) == ["a", "b", "c", "a"]
    assert cycle_path({"x": {"x"}}, ["x"]) == ["x", "x"]
    assert describe_cycle({"a": {"b": (3, True)}, "b": {"a": (7, False)}}, ["a", "b", "a"]) == \
        "a\n  -> b   (a line 3, inside a function)\n  -> a   (b line 7)"


def test_imported_modules_example():
    src = ("from . import b\nfrom ..pkg import c, name\nimport top.d\ndef f():\n    from . import e\n"
           "    import top.d\nclass K:\n    g = lambda: __import__('x')\n    from .b import name\n")
    known = {"top.sub", "top.sub.b", "top.pkg", "top.pkg.c", "top.d", "top.sub.e"}
    assert imported_modules(ast.parse(src), "top.sub.a", False, known) == {
        "top.sub.b": (1, False), "top.pkg": (2, False), "top.pkg.c": (2, False), "top.d": (3, False),
        "top.sub.e": (5, True)}


def test_no_import_cycle():
    """Every import counts, those inside functions too: a function-level import defers a cycle to call
    time but does not remove it, so the arrows of the layering (DESIGN.md) must point one way."""
    graph = import_graph(package_files())
    cycles = find_cycles(graph)
    assert not cycles, "import cycles among toyrl modules (one closed path shown per cycle):\n" + "\n\n".join(
        f"{len(c)} modules: {', '.join(c)}\n" + describe_cycle(graph, cycle_path(graph, c)) for c in cycles)


# ---- (c2) layering ----------------------------------------------------------------------------------
# The rooms of the house, lowest first (README's module table follows this order). A module may import
# from its own room and the rooms before it, never from a later one. ``port`` sits above the trainer and
# below the lab: it imports only credit and objectives, and notebook 10's prototype panel and the credit
# bench compare against it. ``viz`` and ``lab`` share a room (the lab's figures use viz's plot helpers,
# notebook panels read the ledger's settings); ``exercises`` and ``__main__`` may import anything.
LAYERS = (
    ("toyrl.batch", "toyrl.segments"),
    ("toyrl.envs",),
    ("toyrl.codecs",),
    ("toyrl.policies",),
    ("toyrl.rollout",),
    ("toyrl.credit",),
    ("toyrl.objectives",),
    ("toyrl.filters", "toyrl.diagnostics", "toyrl.collapse", "toyrl.plugins", "toyrl.testing"),
    ("toyrl.train",),
    ("toyrl.port",),
    ("toyrl.viz", "toyrl.lab"),
    ("toyrl.cli",),
    ("toyrl.exercises", "toyrl.__main__"),
)


def room(module: str, layers=LAYERS):
    """Index of ``module``'s room in ``layers`` (by its longest listed prefix), None for the package root."""
    best = None
    for k, names in enumerate(layers):
        for n in names:
            if (module == n or module.startswith(n + ".")) and (best is None or len(n) > best[1]):
                best = (k, len(n))
    return None if best is None else best[0]


def upward_imports(graph: dict, layers=LAYERS) -> list:
    """"a (line L[, inside a function]) imports b" for every edge from a room to a later one."""
    out = []
    for a, edges in sorted(graph.items()):
        ra = room(a, layers)
        for b, (line, inside) in sorted(edges.items()):
            rb = room(b, layers)
            if ra is not None and rb is not None and rb > ra:
                out.append(f"{a} (line {line}{', inside a function' if inside else ''}) imports {b}")
    return out


def test_upward_imports_example():
    layers = (("p.low",), ("p.mid", "p.side"), ("p.top",))
    graph = {"p.low.a": {"p.mid.b": (3, True)}, "p.mid.b": {"p.low.a": (1, False), "p.side": (2, False)},
             "p.top": {"p.low.a": (1, False)}, "p": {"p.top": (4, False)}}
    assert room("p.mid.b", layers) == 1 and room("p", layers) is None
    assert upward_imports(graph, layers) == ["p.low.a (line 3, inside a function) imports p.mid.b"]


def test_every_module_has_a_room():
    homeless = sorted(m for m in import_graph(package_files()) if m != "toyrl" and room(m) is None)
    assert not homeless, f"modules in no room of LAYERS: {homeless}"


def test_imports_point_down_the_layers():
    """DESIGN.md's arrows: envs know nothing of training, estimators nothing of envs, the trainer nothing
    of the lab or the CLI. Function-level imports count: they are arrows all the same."""
    up = upward_imports(import_graph(package_files()))
    assert not up, "imports from a later room (LAYERS):\n" + "\n".join(up)


# the lab and the front ends: what ``import toyrl`` must not pull in (it is the envs and the TurnBatch)
LAB_MODULES = ("toyrl.cli", "toyrl.lab", "toyrl.train", "toyrl.viz", "toyrl.exercises", "toyrl.port")


def import_closure(graph: dict, root: str) -> set:
    """The modules that importing ``root`` runs: its imports outside functions, theirs, and so on, with
    the packages above each (importing ``a.b.c`` runs ``a`` and ``a.b`` first). Edges inside functions
    are skipped: they run when the function is called."""
    seen, todo = set(), [root]
    while todo:
        m = todo.pop()
        if m in seen or m not in graph:
            continue
        seen.add(m)
        todo += [".".join(m.split(".")[:k]) for k in range(1, m.count(".") + 1)]
        todo += [w for w, (_, inside) in graph[m].items() if not inside]
    return seen


def test_import_closure_example():
    graph = {"p": {"p.a": (1, False)}, "p.a": {"q.b": (2, False), "r": (3, True)}, "q": {}, "q.b": {}, "r": {}}
    assert import_closure(graph, "p") == {"p", "p.a", "q", "q.b"}


def test_import_toyrl_pulls_in_no_lab_module():
    """``import toyrl`` stays light: no trainer, CLI, ledger, widgets or plots (those are imported by name)."""
    pulled = import_closure(import_graph(package_files()), "toyrl")
    lab = sorted(m for m in pulled if any(m == p or m.startswith(p + ".") for p in LAB_MODULES))
    assert not lab, f"import toyrl pulls in {lab} (all it imports: {sorted(pulled)})"


# ---- (d) every test function checks something ------------------------------------------------------
CHECK_CALLS = ("raises", "warns")
CHECK_PREFIXES = ("assert", "check_")


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def checks_something(fn: ast.AST) -> bool:
    """True when ``fn``'s body holds an ``assert``, a ``pytest.raises`` / ``pytest.warns`` call (as a context
    manager or not), or a call to a function or method named ``assert*`` / ``check_*`` (leading
    underscores aside: ``_check_outputs`` counts)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            name = _call_name(node).lstrip("_")
            if name in CHECK_CALLS or name.startswith(CHECK_PREFIXES):
                return True
    return False


def collect_test_functions(tree: ast.Module):
    """Module-level ``test_*`` functions and ``test_*`` methods of ``Test*`` classes."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for m in node.body:
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test"):
                    yield f"{node.name}.{m.name}", m


def test_checks_something_example():
    tree = ast.parse("def test_a():\n    f()\n\ndef test_b():\n    np.testing.assert_allclose(1, 1)\n\n"
                     "def test_c():\n    with pytest.raises(ValueError):\n        g()\n")
    assert {n: checks_something(f) for n, f in collect_test_functions(tree)} == {"test_a": False, "test_b": True,
                                                                         "test_c": True}


def test_every_test_function_checks_a_value():
    silent = [f"{p.relative_to(ROOT)}:{fn.lineno} {name}" for p in sorted(TESTS.glob("test_*.py"))
              for name, fn in collect_test_functions(parse(p)) if not checks_something(fn)]
    assert not silent, "test functions without an assert / pytest.raises / assert_* or check_* call:\n" + \
        "\n".join(silent)


def helper_imports(tree: ast.Module, local: set) -> list:
    """(line, module) of every import of a module that lives in tests/ (other than conftest)."""
    out = []
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        out += [(node.lineno, n) for n in names if n.split(".")[0] in local or n.startswith("tests.")]
    return out


def test_no_test_module_imports_another():
    """Shared helpers live in tests/conftest.py (fixtures or plain functions), not in test modules."""
    local = {p.stem for p in TESTS.glob("test_*.py")}                  # helper modules (conftest, browser_lab) may be imported
    bad = [f"{p.relative_to(ROOT)}:{line} imports {mod}" for p in sorted(TESTS.glob("*.py"))
           for line, mod in helper_imports(parse(p), local)]
    assert not bad, "test modules importing helpers from other modules in tests/:\n" + "\n".join(bad)


def e402_lines(source: str) -> list:
    """Lines whose comment silences flake8's E402 (a module-level import below other code)."""
    return [tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT and "E402" in tok.string and "noqa" in tok.string]


def test_no_mid_file_imports():
    """Imports stand at the top of a test module (no ``# noqa: E402``): the Agg backend is set in conftest."""
    assert e402_lines("import a\nx = 1\nimport b  # noqa: E402\ns = 'noqa: E402'\n") == [3]
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in sorted(TESTS.glob("*.py")) for line in e402_lines(p.read_text())]
    assert not bad, f"mid-file imports silenced with noqa: E402: {bad}"
