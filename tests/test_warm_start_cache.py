"""The warm-start cache: one training per key across processes, and keys from what a model folder holds."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from envengineer.loop.experiment import load_experiment
from envengineer.loop.stages.warm_start import cache_dir, cached, folder_digest

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
