"""Every code block of docs/integrations.md runs: python blocks are executed, `envengineer` lines of bash
blocks go through the command line, yaml blocks validate as experiment fields; `sh` blocks need software we
do not install or install by hand, and are skipped."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from envengineer.cli import main
from envengineer.loop.experiment import Experiment

for _lib in ("datasets", "gymnasium", "pettingzoo", "reasoning_gym", "tensorboard", "verifiers.v1"):
    pytest.importorskip(_lib)

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "integrations.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer(DOC.read_text(encoding="utf-8"))]


def test_the_page_has_a_snippet_per_integration():
    langs = [lang for lang, _ in blocks()]
    assert langs.count("python") >= 7 and "bash" in langs and "yaml" in langs
    text = DOC.read_text(encoding="utf-8")
    modules = ("hf_datasets", "verl", "gym_env", "pettingzoo_env", "reasoning_gym", "verifiers_env")
    for module in (*modules, "trackers"):
        assert f"envengineer.integrations.{module}" in text


def test_every_snippet_runs_in_order(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    ran = 0
    for i, (lang, code) in enumerate(blocks()):
        where = f"docs/integrations.md block {i} ({lang})"
        if lang == "python":
            exec(compile(code, where, "exec"), {"__name__": f"doc_block_{i}"})
        elif lang == "bash":
            for line in code.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                argv = shlex.split(line)
                assert argv[0] == "envengineer", f"{where}: only envengineer commands run here: {line}"
                assert main(argv[1:]) == 0, f"{where}: {line}\n{capsys.readouterr().err}"
        elif lang == "yaml":
            Experiment.model_validate({"name": "doc", **yaml.safe_load(code)})
        else:
            continue
        ran += 1
    assert ran >= 10
