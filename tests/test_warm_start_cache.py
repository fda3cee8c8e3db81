"""The warm-start cache: one training per key across processes, and keys from what a model folder holds."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from envengineer.loop.experiment import load_experiment
from envengineer.loop.stages.warm_start import cache_dir, cache_key, cached, folder_digest
from envengineer.models.small_policy import DEFAULT_FORMAT, FORMAT_KEY
from envengineer.models.trainee import trainee_manifest

POLICY_FILE = Path(__file__).resolve().parents[1] / "experiments" / "cpu" / "policy-main-fixed.yaml"


def test_runs_that_start_together_train_the_warm_start_once(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "abc"
    trained = []

    def train(name: str):
        def run() -> dict:
            trained.append(name)
            time.sleep(0.3)  # long enough for the other run to arrive while this one trains
            folder = tmp_path / name / "checkpoint"
            folder.mkdir(parents=True)
            (folder / "weights").write_text(name)
            return {"checkpoint": str(folder), "steps": 1}

        return run

    records: dict[str, dict] = {}
    threads = [
        threading.Thread(target=lambda n=n: records.__setitem__(n, cached(cache, train(n))))
        for n in ("a", "b")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(trained) == 1  # the other waited for the lock and reused the stored one
    reused = next(r for r in records.values() if "cached_from" in r)
    assert Path(reused["checkpoint"]) == cache / "checkpoint"
    assert (cache / "checkpoint" / "weights").read_text() == trained[0]


def test_a_model_folder_changed_in_place_is_another_warm_start(tmp_path: Path) -> None:
    folder = tmp_path / "policy"
    folder.mkdir()
    (folder / "config.json").write_text('{"vocab_size": 398}')
    exp = load_experiment(POLICY_FILE, {"model": str(folder)})
    before = cache_dir(exp, [])
    assert cache_dir(exp, []) == before  # the same files: the same entry
    (folder / "config.json").write_text('{"vocab_size": 395}')  # e.g. policy init --overwrite there
    assert cache_dir(exp, []) != before
    assert folder_digest(folder) != folder_digest(tmp_path / "missing")


def _trainee_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The packaged trainee copied to ``tmp_path``, which ``policy:trainee`` then names."""
    from envengineer.models import trainee

    folder = tmp_path / "trainee"
    shutil.copytree(trainee.trainee_path(), folder)
    monkeypatch.setattr(trainee, "trainee_path", lambda: folder)
    return folder


def test_the_packaged_trainee_is_keyed_by_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _trainee_copy(tmp_path, monkeypatch)
    exp = load_experiment(POLICY_FILE, {"model": "policy:trainee"})
    before = cache_dir(exp, [])
    assert cache_key(exp, [])["model_files"] == folder_digest(folder)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # repackaged at the same version with other weights
    weights.write_bytes(bytes(data))
    assert cache_dir(exp, []) != before


def test_the_key_records_the_trainees_own_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _trainee_copy(tmp_path, monkeypatch)
    exp = load_experiment(POLICY_FILE, {"model": "policy:trainee"})
    assert cache_key(exp, [])["policy_format"] == trainee_manifest()["format"]
    config = json.loads((folder / "config.json").read_text())
    config[FORMAT_KEY] = "v1"  # a trainee of another format than the default
    (folder / "config.json").write_text(json.dumps(config))
    assert DEFAULT_FORMAT != "v1"
    assert cache_key(exp, [])["policy_format"] == "v1"


def test_folder_digest_is_unchanged_by_reading_in_blocks(tmp_path: Path) -> None:
    """The shared block reader gives the digest the cache's existing keys were made with."""
    import hashlib

    (tmp_path / "a").write_bytes(b"x" * ((1 << 20) + 3))
    (tmp_path / "b").write_text("y")
    expected = hashlib.sha256(b"a\0" + b"x" * ((1 << 20) + 3) + b"b\0y").hexdigest()
    assert folder_digest(tmp_path) == expected
