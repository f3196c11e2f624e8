"""Where results go (``toyrl.lab.results``): the shipped data/ tree only with --update-shipped, files written whole,
and ``toyrl precompute``'s folders."""
import os
from pathlib import Path

import pytest

from toyrl.lab.results import SHIPPED, atomic_write, out_dir, shipped_dir


def test_out_dir_defaults_to_the_cwd_and_guards_the_shipped_tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert out_dir("claims") == tmp_path / "toyrl-results" / "claims"
    assert out_dir("claims", "mine") == Path("mine")
    assert out_dir("claims", update_shipped=True) == SHIPPED / "claims" == shipped_dir("claims")
    assert out_dir("claims", SHIPPED / "claims" / "heldout", update_shipped=True) == SHIPPED / "claims" / "heldout"
    with pytest.raises(ValueError, match="--out-dir: .* is inside the shipped results .* add --update-shipped"):
        out_dir("runs", SHIPPED / "runs" / "void")
    with pytest.raises(ValueError, match="inside the shipped results"):
        out_dir("scorecard", SHIPPED / "scorecard" / ".." / "claims")        # resolved, not compared as text
    with pytest.raises(ValueError, match="--out-dir: mine is outside .*claims; --update-shipped replaces"):
        out_dir("claims", "mine", update_shipped=True)


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "record.json"
    assert atomic_write(path, b"old\n") == path and path.read_bytes() == b"old\n"
    assert oct(path.stat().st_mode & 0o777) == "0o644"

    def cut(fd):
        raise KeyboardInterrupt                              # Ctrl-C after the bytes, before the rename
    monkeypatch.setattr(os, "fsync", cut)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, b"new, half written")
    assert path.read_bytes() == b"old\n" and sorted(p.name for p in path.parent.iterdir()) == ["record.json"]
    monkeypatch.undo()
    atomic_write(path, b"new\n")
    assert path.read_bytes() == b"new\n" and len(list(path.parent.iterdir())) == 1


def test_cli_precompute_writes_one_folder_per_target(tmp_path, monkeypatch, capsys):
    """Default ./toyrl-results/runs/NAME, --out-dir D/NAME, --update-shipped alone: the module's shipped default."""
    import toyrl.viz.void as void
    from toyrl.cli import main
    calls = []
    monkeypatch.setattr(void, "precompute", lambda **kw: calls.append(kw) or "written")
    monkeypatch.chdir(tmp_path)
    assert main(["precompute", "void"]) == 0
    assert main(["precompute", "void", "--out-dir", "mine"]) == 0
    assert main(["precompute", "void", "--update-shipped"]) == 0
    assert calls == [{"out_dir": tmp_path / "toyrl-results" / "runs" / "void"}, {"out_dir": Path("mine") / "void"}, {}]
    assert capsys.readouterr().out == "void: written\n" * 3
    assert main(["precompute", "void", "--out-dir", str(SHIPPED / "runs")]) == 2 and len(calls) == 3
    assert "add --update-shipped" in capsys.readouterr().err
