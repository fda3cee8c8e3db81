"""Two warm-starts of the same settings and seeds give the same weights, whether the warm-start's boards were
generated in this process or in worker processes started while torch is loaded (issue 41, item 3)."""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

import pytest

from envengineer.loop.experiment import WarmStartSettings
from envengineer.loop.stages import warm_start
from envengineer.mapf import solver
from envengineer.mapf.generator import generate_round


def stage_boards(out: Path, workers: int) -> list:
    """The boards the loop's ``warm_start`` stage draws (its own :func:`warm_start.data`: two agent counts
    on sizes 3 and 4, shuffled together), generated in ``workers`` processes (forced: a round this small
    would otherwise stay in one)."""
    ws = WarmStartSettings(enabled=True, samples=128, sizes=(3, 4), agents=(2, 3), seed=0)
    loop = SimpleNamespace(
        exp=SimpleNamespace(warm_start=ws, seeds=SimpleNamespace(data=0, training=0), num_agents=2),
        space=SimpleNamespace(sizes=(3, 4)),
        comps=SimpleNamespace(generator=functools.partial(generate_round, workers=workers)),
        exclude=frozenset(),
        progress=False,
    )
    solver.MEMO.clear()  # the second training then reads the workers' solutions, not the first one's
    return warm_start.data(loop, out)


@pytest.mark.slow
def test_worker_generated_warm_start_trains_the_same_weights(tmp_path: Path) -> None:
    from envengineer.models.small_policy import init_policy
    from envengineer.training.sft import sft

    policy = str(init_policy(tmp_path / "p", size="tiny"))

    def train(instances: list, name: str) -> Path:
        result = sft(policy, instances, out_dir=tmp_path / name, preset="sft-small", seed=0, max_steps=2)
        assert result.steps == 2
        return Path(result.checkpoint) / "model.safetensors"

    here = stage_boards(tmp_path / "ws-here", workers=1)
    first = train(here, "here")

    import sys

    assert "torch" in sys.modules  # the workers start from a process that has torch loaded
    pooled = stage_boards(tmp_path / "ws-pool", workers=2)
    assert [i.to_json() for i in pooled] == [i.to_json() for i in here]
    assert (tmp_path / "ws-pool" / "manifest.jsonl").read_bytes() == (
        tmp_path / "ws-here" / "manifest.jsonl"
    ).read_bytes()
    assert len(solver.MEMO) > 0  # the workers' solutions came back into this process's memo
    second = train(pooled, "pool")

    import torch
    from safetensors.torch import load_file

    a, b = load_file(str(first)), load_file(str(second))
    assert a.keys() == b.keys()
    differing = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differing, f"{len(differing)} of {len(a)} tensors differ, e.g. {differing[:3]}"
    start = load_file(str(Path(policy) / "model.safetensors"))
    assert any(not torch.equal(start[k], a[k]) for k in a)  # two steps changed the weights
