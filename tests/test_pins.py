"""The pinned GPU set in pyproject.toml resolves: ``pip install --dry-run '.[train,gpu]'`` picks exactly the
pinned vLLM, torch, transformers, TRL, xgrammar and DeepSpeed.

It asks the package index, so it is bounded: when the index does not answer within ``PIN_CHECK_TIMEOUT``
seconds (default 300) or cannot be reached, the test is skipped and says why; a real conflict fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Messages of a resolution that really failed (not a slow or absent index).
_CONFLICT = ("ResolutionImpossible", "conflicting dependencies", "No matching distribution found")


def gpu_pins() -> dict[str, str]:
    """``{name: version}`` of the ``gpu`` extra's ``==`` pins."""
    tomllib = pytest.importorskip("tomllib")
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    pins = {}
    for req in extra:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^;\s]+)", req.strip())
        assert m, f"every requirement of the gpu extra is an exact pin, not {req!r}"
        pins[m.group(1).lower()] = m.group(2)
    return pins


def test_gpu_extra_pins_the_stack() -> None:
    pins = gpu_pins()
    assert {"vllm", "torch", "transformers", "trl", "xgrammar"} <= set(pins)


@pytest.mark.slow
def test_pinned_gpu_set_resolves(tmp_path: Path) -> None:
    pins = gpu_pins()
    report = tmp_path / "report.json"
    timeout = float(os.environ.get("PIN_CHECK_TIMEOUT", "300"))
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
           "--disable-pip-version-check", "--report", str(report), ".[train,gpu]"]  # fmt: skip
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip(f"the package index did not answer within {timeout:.0f} s; the pins were not checked")
    if proc.returncode != 0:
        if any(word in proc.stderr for word in _CONFLICT):
            pytest.fail(f"the pinned GPU set does not resolve:\n{proc.stderr[-3000:]}")
        pytest.skip(f"pip could not reach the package index; the pins were not checked: {proc.stderr[-300:]}")
    chosen = {
        item["metadata"]["name"].lower(): item["metadata"]["version"].split("+")[0]  # 2.13.0+cpu -> 2.13.0
        for item in json.loads(report.read_text())["install"]
    }
    assert {name: chosen.get(name) for name in pins} == pins


def test_the_license_is_an_spdx_expression():
    """PEP 639's form: setuptools warns about the older table (``{text = ...}``) at every build."""
    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"
    assert any(req.startswith("setuptools>=7") and int(req.split(">=")[1].split(".")[0]) >= 77
               for req in meta["build-system"]["requires"])  # fmt: skip
