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


def _modules() -> list[str]:
    out = []
    for path in sorted((ROOT / "zkcoord").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__main__":
            continue  # runs the command line
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append(".".join(parts))
    return out


def test_every_module_imports_first() -> None:
    """Each module imports on its own, as the first zkcoord module of a process: an import cycle through a package's
    ``__init__`` (which a static check does not see) breaks only the module imported first.  One process: zkcoord's
    modules are forgotten before each import, the libraries they use are kept."""
    script = (
        "import importlib, sys\n"
        "failed = []\n"
        "for name in sys.argv[1:]:\n"
        "    for m in [m for m in sys.modules if m == 'zkcoord' or m.startswith('zkcoord.')]:\n"
        "        del sys.modules[m]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        failed.append(f'{name}: {type(e).__name__}: {e}')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *_modules()], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_no_module_is_longer_than_one_sitting() -> None:
    """No module over 500 lines (docs/architecture.md): a module that grows past it is split along a seam."""
    long = {
        str(p.relative_to(ROOT)): n
        for base in ("zkcoord", "tests")
        for p in (ROOT / base).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert long == {}, f"split these along a seam: {long}"
