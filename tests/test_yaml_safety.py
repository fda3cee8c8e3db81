"""YAML is data only: alias bombs fail at once with one line; messages cost what they print."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from envengineer.cli import main
from envengineer.errors import ConfigError
from envengineer.loop.experiment import load_experiment, parse_override
from envengineer.mapf.config import RoundConfig
from envengineer.yamlio import YAMLDataError, brief, load_yaml


def _bomb(levels: int = 9) -> str:
    """A "billion laughs" document: each line refers 9 times to the one before."""
    lines = ["a0: &a0 [x,x,x,x,x,x,x,x,x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_bomb_is_small() -> None:
    assert len(_bomb().encode()) < 400


@pytest.mark.parametrize("what", ["round", "experiment", "cli"])
def test_alias_bomb_fails_fast_with_one_line(
    what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(("name: x\n" if what == "experiment" else "") + _bomb())
    t0 = time.perf_counter()
    if what == "round":
        with pytest.raises(ConfigError) as info:
            RoundConfig.load(path)
        message = str(info.value)
    elif what == "experiment":
        with pytest.raises(ConfigError) as info:
            load_experiment(path)
        message = str(info.value)
    else:
        assert main(["generate", "--config", str(path), "-o", str(tmp_path / "out.jsonl")]) == 2
        message = capsys.readouterr().err.strip()
    assert time.perf_counter() - t0 < 2.0
    assert "\n" not in message and len(message) < 300
    assert "aliases" in message and re.search(r"line \d+, column \d+", message)


def test_aliases_refused_in_overrides_and_data() -> None:
    with pytest.raises(ConfigError, match="aliases"):
        parse_override("rounds=[&a 1, *a]")
    with pytest.raises(YAMLDataError, match="aliases"):
        load_yaml("x: &a 1\ny: *a\n")
    assert load_yaml("x: &a 1\n") == {"x": 1}  # an anchor alone expands nothing


def test_syntax_error_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("sizes:\n  3: {data_ratio: [1,\n")
    with pytest.raises(ConfigError) as info:
        RoundConfig.load(path)
    assert "\n" not in str(info.value) and "line" in str(info.value)


def test_brief_is_bounded_work() -> None:
    huge = [list(range(10_000))] * 10_000  # 10^8 items if serialised
    t0 = time.perf_counter()
    text = brief({"k": huge, "s": "y" * 10_000_000})
    assert time.perf_counter() - t0 < 0.1
    assert len(text) <= 60


def test_experiment_error_about_a_huge_non_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("[" + ",".join(["1"] * 20_000) + "]\n")
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert len(str(info.value)) < 200
