"""Engineer overhead per round at the CPU scale, as a share of the round (issue target: under 5%).

The overhead is what the loop adds to a round beyond training and validation: building the engineer's
context and prompt, reading and checking its answer, projecting the proposal, and generating the next
round's data. The engineer model's own answer (a generation with the current checkpoint) is timed apart,
with ``--model``, and from a real run's ledger.

Two sources for the round time:

* ``--run DIR``: a finished run directory (e.g. ``runs/demo``). Its ledger holds every stage's seconds:
  a round is ``config + data + train + validation``; the engineer's part is ``config`` (context, the model's
  answer, parsing, projection) and ``data``. This is the figure to quote.
* ``--round-seconds S``: a round time measured elsewhere (the micro-benchmark's share is taken against it).

Usage::

    python benchmarks/bench_loop.py                        # micro-benchmark, absolute times
    python benchmarks/bench_loop.py --run runs/demo        # + shares from the demo's ledger
    python benchmarks/bench_loop.py --model --run runs/demo  # + the embedded model's answer, timed here

The micro-benchmark uses the CPU scale: the next round has 32 two-agent instances (``--samples``), the
context is built from the demo's validation set (three agents, sizes 3..10) answered by the greedy policy,
which gives a realistic failure report.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from envengineer.loop.demo import demo_experiment
from envengineer.loop.runner import LoopRunner
from envengineer.loop.seeds import round_seed
from envengineer.loop.stages.config import build_request
from envengineer.loop.state import RoundState

GOOD_ANSWER = json.dumps({
    "rationale": "Most failures are vertex conflicts at 6x6 and above: more mid-size boards that need "
    "a wait, fewer holes at the largest sizes, keep some easy 3x3 and 4x4 boards.",
    "sizes": {str(n): {"data_ratio": w, "hole_ratio": h, "wait_ratio": wr} for n, w, h, wr in [
        (3, 0.08, 0.1, 0.3), (4, 0.12, 0.15, 0.4), (5, 0.18, 0.2, 0.5), (6, 0.2, 0.2, 0.6),
        (7, 0.16, 0.2, 0.6), (8, 0.12, 0.15, 0.5), (9, 0.08, 0.1, 0.5), (10, 0.06, 0.1, 0.4)]},
})  # fmt: skip


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median seconds of ``repeat`` calls, and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def micro(repeat: int, with_model: bool, samples: int) -> dict[str, float]:
    """Seconds of each overhead part at the demo's scale (medians)."""
    from envengineer.engineer.engineers import LLMEngineer
    from envengineer.engineer.prompt import build_messages
    from envengineer.engineer.proposal import check_answer, parse_answer
    from envengineer.mapf.benchmark import build_set
    from envengineer.mapf.config import project
    from envengineer.mapf.generator import generate_round
    from envengineer.mapf.policies import respond
    from envengineer.mapf.scoring import score

    exp = demo_experiment()
    v = exp.validation
    t0 = time.perf_counter()
    validation = build_set(
        seed=v.seed, split="validation", per_cell=v.per_cell, agents=v.agents, max_size=v.max_size, workers=1
    )
    setup_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    report = score(validation, {i.id: respond("greedy", i, rng) for i in validation}).to_json()

    runner = LoopRunner(exp, Path("/nonexistent-bench-run"))
    runner._exclude = frozenset(i.board_hash() for i in validation)  # the benchmark is excluded in real runs
    runner.rounds = [RoundState(index=0, config=runner.round0, validation=report, source="round0")]

    def context() -> Any:
        request = build_request(runner, 1)
        return request, build_messages(request)

    out: dict[str, float] = {"validation set (built once per run, not per round)": setup_s}
    out["context: request + prompt"], (request, messages) = timed(context, repeat)

    def proposal() -> Any:
        parsed = parse_answer(GOOD_ANSWER)
        errors = check_answer(parsed, runner.space)
        assert not errors, errors
        return project(parsed.proposal, request.config, runner.space)

    out["proposal: parse + check + project"], projection = timed(proposal, repeat)
    seed = round_seed(exp.seeds.data, "data", 1)
    config = projection.config.model_validate({**projection.config.model_dump(), "num_samples": samples})
    out[f"next round's data ({samples} instances)"], data = timed(
        lambda: generate_round(config, seed, split="train", exclude=runner.exclude), max(1, repeat // 5)
    )
    assert len(data) == samples
    if with_model:
        from envengineer.models import load_backend

        t0 = time.perf_counter()
        backend = load_backend("hf", None)
        out["engineer model load (once per proposal)"] = time.perf_counter() - t0
        engineer = LLMEngineer(backend, "self", max_retries=exp.engineer.retries)
        t0 = time.perf_counter()
        decision = engineer.propose(request)
        out["engineer model answer (all attempts)"] = time.perf_counter() - t0
        out["_attempts"] = len(decision.attempts)
        out["_fell_back"] = float(decision.fell_back)
    out["_prompt_chars"] = float(sum(len(m["content"]) for m in messages))
    return out


def from_ledger(run: Path) -> dict[str, Any]:
    """Per round: stage seconds and the engineer's share (config + data) of the round, from the ledger."""
    from envengineer.loop.rundir import RunDir

    rows = []
    for r, stages in RunDir(run).iter_round_entries():
        secs = {s: e.seconds for s, e in stages.items()}
        total = sum(secs.values())
        engineer = secs.get("config", 0.0) + secs.get("data", 0.0)
        rows.append(
            {"round": r, **secs, "round_total": total, "engineer_share": engineer / total if total else 0}
        )
    return {"rounds": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, help="a finished run directory: shares from its ledger")
    ap.add_argument(
        "--round-seconds", type=float, help="round time to take the micro-benchmark's share against"
    )
    ap.add_argument("--model", action="store_true", help="also time the embedded model's answer as engineer")
    ap.add_argument("--repeat", type=int, default=20, help="repetitions of each micro-benchmark (median)")
    ap.add_argument(
        "--samples", type=int, default=32, help="instances of the next round (CPU experiments: 32)"
    )
    ap.add_argument("--json", type=Path, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    result: dict[str, Any] = {"micro": micro(args.repeat, args.model, args.samples)}
    m = result["micro"]
    overhead = sum(v for k, v in m.items() if k.startswith(("context", "proposal", "next round")))
    print("Engineer overhead per round at the CPU scale")
    for k, v in m.items():
        if not k.startswith("_"):
            print(f"  {k:<52} {v * 1000:10.1f} ms")
    print(f"  {'overhead without the model (context, proposal, data)':<52} {overhead * 1000:10.1f} ms")
    result["overhead_s"] = overhead

    round_s = args.round_seconds
    if args.run:
        ledger = from_ledger(args.run)
        result["ledger"] = ledger
        print(f"\nFrom {args.run}/ledger.jsonl (seconds):")
        print("  round   config     data    train  validation    total   engineer share (config+data)")
        for row in ledger["rounds"]:
            print(
                f"  {row['round']:>5} {row.get('config', 0):8.1f} {row.get('data', 0):8.1f} "
                f"{row.get('train', 0):8.1f} {row.get('validation', 0):11.1f} {row['round_total']:8.1f}"
                f"   {100 * row['engineer_share']:6.2f} %"
            )
        totals = [row["round_total"] for row in ledger["rounds"]]
        if totals and round_s is None:
            round_s = statistics.mean(totals)
    if round_s:
        result["round_s"] = round_s
        result["share_without_model"] = overhead / round_s
        print(
            f"\nround time {round_s:.1f} s: overhead without the model {100 * overhead / round_s:.3f} % "
            "of the round (target < 5 %)"
        )
        if "engineer model answer (all attempts)" in m:
            with_model = (
                overhead
                + m["engineer model answer (all attempts)"]
                + m["engineer model load (once per proposal)"]
            )
            result["share_with_model"] = with_model / round_s
            print(
                f"with the engineer model's answer and load: {100 * with_model / round_s:.2f} % of the round"
            )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
