"""The wheel carries what the package needs at run time (the HQL grammar is a data file)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_wheel_has_every_module_and_the_grammar(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                           "-w", str(tmp_path), str(REPO)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    wheel = next(tmp_path.glob("hoarddb-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "hoarddb/hql/hql.lark" in names
    for module in REPO.joinpath("hoarddb").rglob("*.py"):
        assert module.relative_to(REPO).as_posix() in names, module
