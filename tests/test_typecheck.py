"""Static types: mypy over exporter/ with the configuration in pyproject.toml ([tool.mypy]) finds nothing.

mypy rather than pyright: it installs from PyPI into the project's virtualenv like every other test tool
(pyright is a Node.js program), and its per-line `# type: ignore[code]` names what is waived."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import IN_CI

ROOT = Path(__file__).resolve().parents[1]


def test_exporter_type_checks_clean():
    if importlib.util.find_spec("mypy") is None:
        msg = "mypy is not installed: pip install -e '.[test]' (scripts/test does)"
        pytest.fail(msg) if IN_CI else pytest.skip(msg)
    # the files to check come from the configuration; the cache goes to a throwaway place, not the checkout
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", "/dev/null"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mypy found type errors (fix them, or waive one line with a reason):\n" \
                                 f"{proc.stdout}{proc.stderr}"
    assert "Success" in proc.stdout, proc.stdout
