"""``bench_grpo.py warm``: train one warm-start (``policy init`` + ``sft-small``) and score it.

A library module (no ``__main__``; it imports no script): ``bench_grpo.py`` runs :func:`cmd_warm`.

The warm-start learns 2- and 3-agent boards (``--agents``, equal shares, mixed within every batch) that
exclude the held-out set, and is scored greedily on the two-agent held-out set, its sizes 3-6 alone and
the three-agent set. Run it as ``python benchmarks/bench_grpo.py warm --out DIR`` (its arguments are in
``bench_grpo.parse_args``); ``DIR/warm.json`` holds the record.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from common import answer, board_flags, held_out, public
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.generator import generate_round
from envengineer.mapf.instance import Instance


def cmd_warm(args: argparse.Namespace) -> int:
    from envengineer.models.small_policy import init_policy
    from envengineer.training.sft import sft

    agents = [int(a) for a in args.agents.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    validation = held_out(args.per_cell)
    exclude = frozenset(i.board_hash() for i in validation)
    train: list[Instance] = []
    for k, a in enumerate(agents):
        config = RoundConfig.model_validate(
            {
                "sizes": {
                    n: {"data_ratio": 1.0, "hole_ratio": 0.25, "wait_ratio": 0.5} for n in sizes if n >= a
                },
                "num_agents": a,
                "num_samples": args.samples // len(agents),
            }
        )
        train += generate_round(config, args.seed + k, split="train", exclude=exclude)
    np.random.default_rng(args.seed).shuffle(train)  # mix agent counts within every batch
    policy = init_policy(args.out / "policy", size=args.size, seed=args.seed, overwrite=True)
    t0 = time.perf_counter()
    result = sft(
        str(policy), train, out_dir=args.out / "sft", preset="sft-small", seed=args.seed, max_steps=args.steps
    )
    minutes = (time.perf_counter() - t0) / 60
    two = board_flags(validation, answer(str(result.checkpoint), validation))
    three_set = held_out(max(1, args.per_cell // 2), agents=3)
    three = board_flags(three_set, answer(str(result.checkpoint), three_set))
    small = [i for i in validation if i.size <= 6]
    small_score = board_flags(small, answer(str(result.checkpoint), small))
    record = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "minutes": round(minutes, 2),
        "checkpoint": str(result.checkpoint),
        "two_agents": public(two),
        "two_agents_sizes_3_6": public(small_score),
        "three_agents": public(three),
    }
    print(json.dumps(record, indent=2))
    (args.out / "warm.json").write_text(json.dumps(record, indent=2) + "\n")
    return 0
