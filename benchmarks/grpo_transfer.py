"""``bench_grpo.py transfer``: does a GRPO gain carry to boards never trained on?

A library module (no ``__main__``; it imports no script): ``bench_grpo.py`` runs :func:`cmd_transfer`.
One variant x seeds, in lanes (:func:`grpo_runs.finished_runs`). The warm-start and each result are
scored greedily, board by board, on four sets (:data:`SETS`): a sample of the run's own training boards
(``--train-eval``, chosen by seed, distinct layouts), the two-agent held-out set, and one- and three-agent
held-out sets (``--per-cell`` // 2). Prints per set the warm and mean after rates and the mean paired gain
with a 95 % bootstrap interval over seeds and boards (:func:`envengineer.loop.intervals.paired_seed_gain`).
``--boards N`` trains on N boards cycled over the steps' prompts (several passes), 0 a fresh board per prompt.
Run it as ``python benchmarks/bench_grpo.py transfer ...`` (its arguments are in ``bench_grpo.parse_args``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common import answer, answer_tokens, board_flags, ci_text, held_out, public
from envengineer.loop.intervals import paired_seed_gain
from envengineer.mapf.instance import Instance
from grpo_runs import finished_runs, per_step, train_one, variant_preset

TRAINED = "trained-on"
#: The transfer table's rows, in order.
SETS = (TRAINED, "held-out 2 agents", "held-out 1 agent", "held-out 3 agents")


def transfer_sets(per_cell: int, tokens: int | None = None) -> dict[str, tuple[list[Instance], int]]:
    """The held-out sets of ``transfer`` with their answer budget (``tokens``, else :func:`answer_tokens`)."""
    fewer = max(1, per_cell // 2)
    tokens = tokens or answer_tokens()
    return {
        "held-out 2 agents": (held_out(per_cell), tokens),
        "held-out 1 agent": (held_out(fewer, agents=1), tokens),
        "held-out 3 agents": (held_out(fewer, agents=3), tokens),
    }


def trained_sample(prompts: Sequence[Instance], count: int, seed: int) -> list[Instance]:
    """At most ``count`` distinct boards (by hash) among the prompts, chosen by ``seed``, in prompt order."""
    distinct: dict[str, Instance] = {}
    for inst in prompts:
        distinct.setdefault(inst.board_hash(), inst)
    boards = list(distinct.values())
    rng = np.random.default_rng(np.random.SeedSequence((seed, 0x7EA1)))
    chosen = rng.choice(len(boards), size=min(count, len(boards)), replace=False)
    return [boards[i] for i in sorted(chosen.tolist())]


def run_transfer(
    args: argparse.Namespace, seed: int, sets: dict[str, tuple[list[Instance], int]], exclude: frozenset[str]
) -> dict[str, Any]:
    """One ``transfer`` seed: train, then the result's flags on every set and the warm-start's on the
    seed's own trained-on sample (the held-out sets' warm flags are the parent's, the same for all)."""
    result, prompts, minutes = train_one(args, args.variant, seed, exclude)
    trained = trained_sample(prompts, args.train_eval, seed)
    model = str(result.checkpoint)
    after = {
        name: board_flags(boards, answer(model, boards, tokens)) for name, (boards, tokens) in sets.items()
    }
    after[TRAINED] = board_flags(trained, answer(model, trained, args.max_completion_length))
    distinct = len({id(i) for i in prompts})  # the boards drawn; layouts may repeat on small sizes
    return {
        "seed": seed,
        "minutes": round(minutes, 2),
        "prompts": len(prompts),
        "boards": distinct,
        "passes": round(len(prompts) / distinct, 2),
        "warm_trained": _flags(
            board_flags(trained, answer(str(args.warm), trained, args.max_completion_length))
        ),
        "after": {name: _flags(after[name]) for name in SETS},
    }


def transfer_table(warm: dict[str, dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per set and metric, :func:`paired_seed_gain` over the runs (warm: the held-out sets' warm flags)."""
    table: dict[str, Any] = {}
    for name in SETS:
        if name == TRAINED:
            before = {k: [r["warm_trained"][k] for r in runs] for k in ("valid", "optimal")}
        else:
            before = {k: [warm[name][k]] * len(runs) for k in ("valid", "optimal")}
        table[name] = {
            k: paired_seed_gain(before[k], [r["after"][name][k] for r in runs], shared_boards=name != TRAINED)
            for k in ("valid", "optimal")
        }
    return table


def print_transfer(table: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    """The transfer table (percentages; gains in points with 95 % intervals) and one line per seed."""
    print(
        "\n| set | boards | warm valid % | warm optimal % | after valid % | after optimal % "
        "| gain valid (95 % CI) | gain optimal (95 % CI) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in SETS:
        v, o = table[name]["valid"], table[name]["optimal"]
        boards = "/".join(str(b) for b in sorted(set(v["boards"])))
        print(
            f"| {name} | {boards} | {v['warm_pct']:.1f} | {o['warm_pct']:.1f} | {v['after_pct']:.1f} "
            f"| {o['after_pct']:.1f} | {ci_text(v)} | {ci_text(o)} |"
        )
    print()
    for i, run in enumerate(runs):
        gains = ", ".join(
            f"{name} {table[name]['valid']['per_seed'][i]:+.1f}/{table[name]['optimal']['per_seed'][i]:+.1f}"
            for name in SETS
        )
        print(f"- seed {run['seed']} ({run['minutes']:.1f} min), gain valid/optimal: {gains}")


def cmd_transfer(args: argparse.Namespace) -> int:
    seeds = [int(s) for s in args.seeds.split(",")]
    sets = transfer_sets(args.per_cell, args.max_completion_length)
    exclude = frozenset(i.board_hash() for boards, _ in sets.values() for i in boards)
    # the held-out sets' warm flags once, here; each run scores the warm-start on its own trained-on boards
    warm = {
        name: board_flags(boards, answer(str(args.warm), boards, tokens))
        for name, (boards, tokens) in sets.items()
    }
    for name, w in warm.items():
        print(
            f"# warm-start on {name} ({len(w['valid'])} boards): "
            f"valid {w['valid_pct']} % optimal {w['optimal_pct']} %"
        )
    prompts = args.steps * per_step(variant_preset(args.variant, args.steps, args.max_completion_length))
    boards = args.boards or prompts
    print(
        f"# training: {boards} boards x {prompts / boards:.2f} passes = {prompts} prompts per seed",
        flush=True,
    )
    runs: list[dict[str, Any]] = []
    record: dict[str, Any] = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "warm": {n: _flags(w) for n, w in warm.items()},
    }
    for row in finished_runs(args, run_transfer, [(seed, sets, exclude) for seed in seeds]):
        runs.append(row)
        runs.sort(key=lambda r: r["seed"])
        print(f"# seed {row['seed']} done in {row['minutes']:.1f} min", flush=True)
        _write(args.json, {**record, "runs": runs})
    table = transfer_table(record["warm"], runs)
    print_transfer(table, runs)
    _write(args.json, {**record, "runs": runs, "table": table})
    return 0


def _flags(s: dict[str, Any]) -> dict[str, Any]:
    """A score with its per-board flags as 0/1 lists (JSON)."""
    return {
        **public(s),
        "valid": s["valid"].astype(int).tolist(),
        "optimal": s["optimal"].astype(int).tolist(),
    }


def _write(path: Path | None, record: dict[str, Any]) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2) + "\n")
