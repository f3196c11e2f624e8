"""Rejudge the shipped ledger under its rule (``stats.VERDICT_RULE``, ``judge``) from the stored numbers (nothing is
re-run), then rewrite the table of docs/claims.md:

    python -m toyrl.lab.claims.rejudge

Every record of ``data/claims`` and ``data/claims/heldout`` (registrations included) goes through ``judge.rejudge``;
a file is rewritten only where that changes it.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import CLAIMS, SHIPPED_DIR, write_table
from .judge import rejudge
from .report import write_json

__all__ = ["rejudge_shipped"]


def rejudge_shipped(root=None) -> list:
    """Rejudge every claim record of the shipped ledger (``root`` and ``root/heldout``; default data/claims),
    registrations (``<claim>.pending.json``) included, rewriting those that change; returns the paths rewritten."""
    root = Path(root) if root is not None else SHIPPED_DIR
    changed = []
    for folder in (root, root / "heldout"):
        for name, claim in CLAIMS.items():
            for path in (folder / f"{name}.json", folder / f"{name}.pending.json"):
                if path.exists():
                    rec = json.loads(path.read_text())
                    new = rejudge(claim, rec)
                    if new != rec:
                        write_json(path, new)
                        changed.append(path)
    return changed


if __name__ == "__main__":
    for p in rejudge_shipped():
        print(f"rejudged {p}")
    write_table()
