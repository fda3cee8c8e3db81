"""Stage ``data``: the round's training instances from its configuration, never a held-out board."""

from __future__ import annotations

from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.records import manifest_row
from envengineer.loop.rundir import atomic_write_json, atomic_write_jsonl
from envengineer.loop.seeds import round_seed
from envengineer.loop.state import Loop, RoundState
from envengineer.mapf.instance import Instance, load_instances, save_instances


def run(loop: Loop, state: RoundState) -> tuple[dict[str, Any], dict[str, Any]]:
    r = state.index
    d = loop.rd.round_dir(r) / "dataset"
    seed = round_seed(loop.exp.seeds.data, "data", r)
    instances = loop.comps.generator(
        state.config, seed, split="train", exclude=loop.exclude, progress=loop.progress
    )
    clash = {i.board_hash() for i in instances} & loop.exclude
    if clash:
        raise ConfigError(f"round {r}: {len(clash)} training boards are validation or benchmark boards")
    save_instances(instances, d / "instances.jsonl.gz")
    atomic_write_jsonl(d / "manifest.jsonl", (manifest_row(i) for i in instances))
    by_size: dict[int, int] = {}
    for inst in instances:
        by_size[inst.size] = by_size.get(inst.size, 0) + 1
    info = {
        "seed": seed,
        "instances": len(instances),
        "per_size": {str(k): v for k, v in sorted(by_size.items())},
        "needs_wait": sum(bool(i.needs_wait) for i in instances),
    }
    atomic_write_json(d / "summary.json", info)
    return {"manifest": d / "manifest.jsonl", "instances": d / "instances.jsonl.gz"}, info


def instances(loop: Loop, r: int) -> list[Instance]:
    return load_instances(loop.rd.round_dir(r) / "dataset" / "instances.jsonl.gz")
