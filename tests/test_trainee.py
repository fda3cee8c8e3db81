"""The packaged trainee (``policy:trainee``): its files, its manifest, and the answers it records."""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import pytest

from envengineer.errors import ConfigError
from envengineer.mapf.instance import Instance
from envengineer.mapf.validator import validate
from envengineer.models import trainee as trainee_module
from envengineer.models.embedded import resolve_model
from envengineer.models.small_policy import FORMAT_KEY, is_small_policy
from envengineer.models.trainee import TRAINEE_NAME, is_trainee_name, trainee_manifest, trainee_path


def test_the_name_resolves_to_the_packaged_folder():
    folder = trainee_path()
    assert Path(resolve_model(TRAINEE_NAME)) == folder
    assert Path(resolve_model(" Policy:Trainee ")) == folder
    assert is_small_policy(TRAINEE_NAME) and is_small_policy(str(folder))
    assert not is_trainee_name("policy:tiny")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config[FORMAT_KEY] == trainee_manifest()["format"] == "free-moves"


def test_the_manifest_says_how_it_was_built_and_what_it_measured():
    m = trainee_manifest()
    assert m["name"] == TRAINEE_NAME
    assert "bench_warm_start.py" in m["rebuild"][0] and f"--seed {m['seed']}" in m["rebuild"][0]
    assert m["rebuild"][1].startswith("python scripts/package_trainee.py")
    assert re.fullmatch(r"[0-9a-f]{40}(\+changes)?", m["commit"]), m["commit"]
    assert m["steps"] > 0 and m["train_minutes"] > 0
    assert m["data"]["agents"] == "1,2,3" and m["data"]["samples"] > 0
    for k in ("1", "2", "3"):
        rates = m["held_out"][k]
        assert rates["boards"] == 288
        assert 0 <= rates["optimal"] <= rates["valid"] <= 100


def test_the_packaged_files_are_those_the_manifest_records():
    """Each file's SHA-256 and size and the weights' parameter count, recomputed from the shipped files."""
    safe_open = pytest.importorskip("safetensors").safe_open
    folder = trainee_path()
    m = trainee_manifest()
    shipped = sorted(f.name for f in folder.iterdir() if f.is_file() and f.name != "manifest.json")
    assert sorted(m["files"]) == shipped
    for name, facts in m["files"].items():
        data = (folder / name).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (facts["sha256"], facts["bytes"]), name
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    count, layers = 0, set()
    with safe_open(str(folder / "model.safetensors"), framework="numpy") as f:
        for key in f.keys():
            shape = f.get_slice(key).get_shape()
            count += math.prod(shape)
            if key.startswith("model.layers."):
                layers.add(int(key.split(".")[2]))
            if key == "model.embed_tokens.weight":
                assert shape == [config["vocab_size"], config["hidden_size"]]
    assert count == m["parameters"] and len(layers) == config["num_hidden_layers"]


def test_the_recorded_verdicts_are_the_validators():
    """The manifest's six answers re-judged: the verdicts it records are what the validator says."""
    for check in trainee_manifest()["checks"]:
        verdict = validate(Instance.from_dict(check["instance"]), check["answer"])
        assert (verdict.valid, verdict.optimal) == (check["valid"], check["optimal"])


def test_the_shipped_weights_give_the_recorded_answers():
    """Greedy answers of the packaged weights to the manifest's boards, word for word, and their verdicts."""
    from envengineer.mapf.prompt import build_messages
    from envengineer.models import SamplingParams
    from envengineer.models.hf import HFBackend

    checks = trainee_manifest()["checks"]
    assert len(checks) == 6
    boards = [Instance.from_dict(c["instance"]) for c in checks]
    assert sorted(b.num_agents for b in boards) == [1, 1, 2, 2, 3, 3]
    backend = HFBackend(str(trainee_path()), device="cpu")
    params = SamplingParams(temperature=0.0, max_new_tokens=640)
    out = backend.generate([build_messages(b, style="compact") for b in boards], params)
    for board, check, completion in zip(boards, checks, out, strict=True):
        assert completion.text == check["answer"], board.id
        verdict = validate(board, completion.text)
        assert (verdict.valid, verdict.optimal) == (check["valid"], check["optimal"]), board.id
    assert sum(c["valid"] for c in checks) >= 3  # a trainee that answers, not one that only loads


def test_a_damaged_install_names_what_is_missing(tmp_path, monkeypatch):
    folder = tmp_path / "envengineer" / "data" / "trainee"
    folder.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "manifest.json"):
        (folder / name).write_text("{}", encoding="utf-8")
    monkeypatch.setattr(trainee_module, "files", lambda package: tmp_path / package)
    with pytest.raises(ConfigError, match=r"lacks model\.safetensors; reinstall"):
        trainee_path()
    with pytest.raises(ConfigError, match=r"model\.safetensors"):
        resolve_model(TRAINEE_NAME)
