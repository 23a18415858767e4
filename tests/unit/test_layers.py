"""The house's import rule (docs/architecture.md, pyproject's ``[tool.importlinter]``): every part of zkcoord sits in
one layer, a layer imports only those below it, the coordinator and the consumer never import each other, kazoo only
behind ``zkcoord.zk``, and no package has an import cycle.  ``lint-imports`` checks the contracts; this test runs it
and checks that the contracts still cover every package (a new one must be placed in a layer)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts: list[dict[str, object]] = config["contracts"]
    return contracts


def test_every_part_of_zkcoord_is_in_one_layer() -> None:
    [layers] = [c for c in _contracts() if c["type"] == "layers"]
    placed = [name.strip() for layer in layers["layers"] for name in str(layer).split("|")]  # type: ignore[attr-defined]
    parts = {
        f"zkcoord.{p.stem}"
        for p in (ROOT / "zkcoord").iterdir()
        if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and not p.stem.startswith("__"))
    }
    assert sorted(placed) == sorted(set(placed)), "a part is in two layers"
    assert set(placed) == parts, f"not in a layer: {sorted(parts - set(placed))}; gone: {sorted(set(placed) - parts)}"


def test_the_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-4000:]
