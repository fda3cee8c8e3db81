"""``policy init``: --overwrite replaces a model folder's contents, ASCII seeds, errors before torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from envengineer.cli import main
from envengineer.errors import ConfigError
from envengineer.models.small_policy import (
    MAX_SEED,
    init_policy,
    parse_policy_name,
    replaceable_folder,
)

BAD_SEEDS = ["1_0", "٣", "", "-1", "+3", " 3", str(MAX_SEED + 1)]


@pytest.mark.parametrize("name", [f"policy:tiny@{seed}" for seed in BAD_SEEDS])
def test_model_name_seeds_are_ascii_digits_within_the_seed_bounds(name: str) -> None:
    with pytest.raises(ConfigError, match="bad seed"):
        parse_policy_name(name)


def test_model_name_seeds_in_bounds_parse() -> None:
    assert parse_policy_name("policy:tiny") == ("tiny", 0)
    assert parse_policy_name("policy:small@3") == ("small", 3)
    assert parse_policy_name(f"policy:tiny@{MAX_SEED}") == ("tiny", MAX_SEED)


@pytest.mark.parametrize("seed", ["-1", "1_0", "٣", str(MAX_SEED + 1)])
def test_init_refuses_the_seeds_a_model_name_refuses(
    seed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["policy", "init", "--out", str(tmp_path / "p"), "--seed", seed])
    assert exc.value.code == 2
    assert "argument --seed" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="bad seed"):
        parse_policy_name(f"policy:tiny@{seed}")
    assert not (tmp_path / "p").exists()


_NO_TORCH = """
import sys
from envengineer.cli import main
code = main(sys.argv[1:])
print("torch imported" if "torch" in sys.modules else "torch not imported", code)
"""


@pytest.mark.parametrize(
    "extra", [["--max-length", "5"], ["--seed", "-1"], ["--full"], ["--full", "--overwrite"]]
)
def test_argument_errors_arrive_before_torch_is_imported(extra: list[str], tmp_path: Path) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("keep")
    args = ["policy", "init", "--out", str(full if "--full" in extra else tmp_path / "new")]
    args += [a for a in extra if a != "--full"]
    proc = subprocess.run(
        [sys.executable, "-c", _NO_TORCH, *args], capture_output=True, text=True, timeout=60
    )
    if proc.returncode == 0:  # main returned the exit code: the error went through the CLI boundary
        assert proc.stdout.split() == ["torch", "not", "imported", "2"]
    else:  # argparse exits by itself
        assert proc.returncode == 2
    assert "envengineer" in proc.stderr and "Traceback" not in proc.stderr
    assert (full / "notes.txt").read_text() == "keep"


@pytest.mark.parametrize("seed", [-1, MAX_SEED + 1, True, 1.0])
def test_init_policy_refuses_seeds_out_of_bounds(seed: object, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must be an integer in"):
        init_policy(tmp_path / "p", seed=seed)  # type: ignore[arg-type]
    assert not (tmp_path / "p").exists()


def test_overwrite_replaces_only_model_folders(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    assert not replaceable_folder(run)  # a subfolder: never emptied
    with pytest.raises(ConfigError, match="not a model folder"):
        init_policy(run, overwrite=True)
    assert (run / "checkpoint").is_dir() and (run / "config.json").read_text() == "{}"
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("keep")
    assert not replaceable_folder(notes)  # no config.json: not a model folder
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "adapter_config.json").write_text("{}")
    assert replaceable_folder(model)


def test_overwrite_leaves_no_file_of_the_old_model(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    folder = init_policy(tmp_path / "p", seed=0)
    (folder / "adapter_config.json").write_text('{"peft_type": "LORA"}')
    (folder / "adapter_model.safetensors").write_bytes(b"old")
    before = sorted(p.name for p in folder.iterdir())
    assert init_policy(folder, seed=1, overwrite=True) == folder
    after = sorted(p.name for p in folder.iterdir())
    assert "adapter_config.json" not in after and "adapter_model.safetensors" not in after
    assert set(after) == set(before) - {"adapter_config.json", "adapter_model.safetensors"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the temporary folder is gone
