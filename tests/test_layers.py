"""The code's shape holds: import-linter's contracts (pyproject.toml) are kept, docs/dev/architecture.md draws the
same layers, ruff finds nothing in the code, and mypy no error in the public API."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
RUFF = Path(sys.executable).with_name("ruff")
MYPY = Path(sys.executable).with_name("mypy")


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed (pip install '.[test]')")
def test_every_import_contract_is_kept():
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"Contracts: {len(contracts())} kept, 0 broken." in done.stdout


def test_the_architecture_page_draws_the_layers_the_contract_checks():
    """docs/dev/architecture.md's block under "The layers, as checked" lists the contract's layers, top first."""
    page = (ROOT / "docs" / "dev" / "architecture.md").read_text()
    block = re.search(r"## The layers, as checked\n.*?```\n(.*?)```", page, re.S)
    assert block, "docs/dev/architecture.md has no section 'The layers, as checked' with a code block"
    drawn = [" | ".join(sorted(p.strip().removeprefix("hoarddb/").rstrip("/").removesuffix(".py")
                               for p in line.split("|")))
             for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith(("↓", "#"))]
    layers = next(c for c in contracts() if c["type"] == "layers")["layers"]
    checked = [" | ".join(sorted(m.strip().removeprefix("hoarddb.") for m in layer.split("|"))) for layer in layers]
    assert drawn == checked, f"the page draws\n{drawn}\nthe contract checks\n{checked}"


@pytest.mark.skipif(not RUFF.exists(), reason="ruff is not installed (pip install '.[test]')")
def test_ruff_finds_nothing():
    """pyproject.toml's [tool.ruff] checks, over the package, its tests and its benchmarks."""
    done = subprocess.run([str(RUFF), "check", "--no-cache", "--output-format", "concise", "hoarddb", "tests", "bench"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.skipif(not MYPY.exists(), reason="mypy is not installed (pip install '.[test]')")
def test_mypy_finds_no_error_in_the_public_api():
    """pyproject.toml's [tool.mypy] names the files: hoarddb's exports, api, client, aio, errors, operations."""
    done = subprocess.run([str(MYPY), "--cache-dir", os.devnull], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout
