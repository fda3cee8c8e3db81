"""The testbed is usable alone: importing it pulls in neither torch nor transformers."""

from __future__ import annotations

import subprocess
import sys


def test_testbed_imports_no_ml_stack():
    code = (
        "import sys, envengineer.mapf.benchmark, envengineer.mapf.scoring, envengineer.mapf.policies, "
        "envengineer.mapf.rewards, envengineer.mapf.generator, envengineer.cli.testbed; "
        "bad = [m for m in ('torch', 'transformers', 'trl', 'peft') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_cli_help_is_fast_and_lists_commands():
    out = subprocess.run([sys.executable, "-m", "envengineer.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for cmd in ("generate", "solve", "benchmark", "score", "show", "play"):
        assert cmd in out.stdout
