"""Stage ``data``: the round's training instances from its configuration, never a held-out board."""

from __future__ import annotations

from typing import Any

import numpy as np

from envengineer.errors import ConfigError
from envengineer.loop.records import manifest_row
from envengineer.loop.rundir import atomic_write_json, atomic_write_jsonl
from envengineer.loop.seeds import round_seed
from envengineer.loop.state import Loop, RoundState
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.instance import Instance, load_instances, save_instances


def run(loop: Loop, state: RoundState) -> tuple[dict[str, Any], dict[str, Any]]:
    r = state.index
    d = loop.rd.round_dir(r) / "dataset"
    seed = round_seed(loop.exp.seeds.data, "data", r)
    instances = boards(loop, state.config, seed)
    clash = {i.board_hash() for i in instances} & loop.exclude
    if clash:
        raise ConfigError(f"round {r}: {len(clash)} training boards are validation or benchmark boards")
    save_instances(instances, d / "instances.jsonl.gz")
    atomic_write_jsonl(d / "manifest.jsonl", (manifest_row(i) for i in instances))
    by_size: dict[int, int] = {}
    for inst in instances:
        by_size[inst.size] = by_size.get(inst.size, 0) + 1
    by_agents: dict[int, int] = {}
    for inst in instances:
        by_agents[inst.num_agents] = by_agents.get(inst.num_agents, 0) + 1
    info = {
        "seed": seed,
        "instances": len(instances),
        "per_size": {str(k): v for k, v in sorted(by_size.items())},
        "per_agents": {str(k): v for k, v in sorted(by_agents.items())},
        "needs_wait": sum(bool(i.needs_wait) for i in instances),
    }
    atomic_write_json(d / "summary.json", info)
    return {"manifest": d / "manifest.jsonl", "instances": d / "instances.jsonl.gz"}, info


def boards(loop: Loop, config: RoundConfig, seed: int) -> list[Instance]:
    """The round's boards from ``config``: its ``num_agents`` alone, or with ``training.agents`` equal
    shares of each count on the configuration's sizes that fit it (a map must hold its agents: sizes
    ``>= count``, the benchmark's rule), shuffled together so every batch mixes them. The first count's
    boards come from ``seed`` itself, the others from streams of it."""
    counts = loop.exp.training.agents
    if not counts:
        return loop.comps.generator(config, seed, split="train", exclude=loop.exclude, progress=loop.progress)
    shares = [
        config.num_samples // len(counts) + (k < config.num_samples % len(counts)) for k in range(len(counts))
    ]
    out: list[Instance] = []
    for k, (count, share) in enumerate(zip(counts, shares, strict=True)):
        sizes = {n: knobs for n, knobs in config.sizes.items() if n >= count}
        if not sizes or share == 0:
            raise ConfigError(
                f"training.agents: {count} agents fit none of the round's map sizes {sorted(config.sizes)} "
                f"(or the round has fewer boards than agent counts); drop {count} from training.agents"
            )
        part = RoundConfig.model_validate(
            {**config.model_dump(), "sizes": sizes, "num_agents": count, "num_samples": share}
        )
        stream = seed if k == 0 else round_seed(seed, "agents", k)
        out += loop.comps.generator(part, stream, split="train", exclude=loop.exclude, progress=loop.progress)
    order = np.random.default_rng(round_seed(seed, "agents", 0)).permutation(len(out))
    return [out[i] for i in order]


def instances(loop: Loop, r: int) -> list[Instance]:
    return load_instances(loop.rd.round_dir(r) / "dataset" / "instances.jsonl.gz")
