"""Package a warm-start run as the trainee that ships with envengineer (``policy:trainee``).

Reads a ``benchmarks/bench_warm_start.py`` run (its ``--out`` folder and ``--json`` record), copies the
checkpoint's weights and tokenizer into ``src/envengineer/data/trainee/`` and writes ``manifest.json``:
the commands that rebuild it, its seed, data and steps, the commit, the held-out rates the run measured,
and a few boards with the greedy answers the copied weights give them (``tests/test_trainee.py`` checks
that the shipped weights still give them). The build, as measured (docs/models.md, "The packaged
trainee")::

    python benchmarks/bench_warm_start.py --format free-moves --agents 1,2,3 --seed 0 --minutes 75 \\
        --max-completion-length 640 --samples 192000 --steps 6000 --length-groups 2 --save-every 750 \\
        --out runs/trainee --json runs/trainee/record.json
    python scripts/package_trainee.py runs/trainee
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

#: The checkpoint's files that make a loadable policy (the trainer's state stays behind).
POLICY_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)
#: Held-out boards per agent count whose answers the manifest records.
CHECKS_PER_COUNT = 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="the bench_warm_start.py --out folder")
    p.add_argument("--record", type=Path, default=None, help="its --json record (default RUN/record.json)")
    p.add_argument("--checkpoint", type=Path, default=None, help="default RUN/sft/checkpoint")
    p.add_argument(
        "--out", type=Path, default=ROOT / "src" / "envengineer" / "data" / "trainee", help="package folder"
    )
    return p.parse_args(argv)


def held_out_rates(record: dict[str, Any]) -> dict[str, Any]:
    """The record's headline per agent count: the policy's and greedy's valid / optimal %, sizes 3-8."""
    rates: dict[str, Any] = {}
    for k, s in record["sets"].items():
        rates[str(k)] = {
            "boards": sum(row["boards"] for row in s["policy"]["by_size"].values()),
            "valid": s["policy"]["sizes_3_8"]["valid"],
            "optimal": s["policy"]["sizes_3_8"]["optimal"],
            "greedy_valid": s["greedy"]["sizes_3_8"]["valid"],
        }
    return rates


def answer_checks(folder: Path) -> list[dict[str, Any]]:
    """A few held-out boards of each agent count, with the packaged weights' greedy answers."""
    from bench_grpo import answer, held_out
    from envengineer.mapf.validator import validate

    boards = [b for k in (1, 2, 3) for b in held_out(1, agents=k, max_size=5)[:CHECKS_PER_COUNT]]
    texts = answer(str(folder), boards, 640)
    checks = []
    for board, text in zip(boards, texts, strict=True):
        verdict = validate(board, text)
        checks.append(
            {"instance": board.to_dict(), "answer": text, "valid": verdict.valid, "optimal": verdict.optimal}
        )
    return checks


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    record = json.loads((args.record or args.run / "record.json").read_text(encoding="utf-8"))
    checkpoint = args.checkpoint or args.run / "sft" / "checkpoint"
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    for name in POLICY_FILES:
        if (checkpoint / name).is_file():
            shutil.copy2(checkpoint / name, args.out / name)
    run_args = record["args"]
    import torch
    import transformers

    from bench_warm_start import source_commit

    manifest = {
        "name": "policy:trainee",
        "about": "the tiny free-moves small policy, supervised on the exact solver's optimal plans of "
        "one-, two- and three-agent boards until more training no longer moved its held-out rates",
        "rebuild": [
            "python benchmarks/bench_warm_start.py --format {format} --agents {agents} --seed {seed} "
            "--minutes {minutes} --max-completion-length {max_completion_length} --samples {samples} "
            "--steps {steps} --length-groups {length_groups} --save-every {save_every} --out runs/trainee "
            "--json runs/trainee/record.json".format(**run_args),
            "python scripts/package_trainee.py runs/trainee",
        ],
        "format": record["format"],
        "seed": int(run_args["seed"]),
        "data": {
            "agents": run_args["agents"],
            "sizes": run_args["sizes"],
            "samples": int(run_args["samples"]),
            "hole_ratio": run_args["holes"],
            "wait_ratio": 0.5,
        },
        "preset": run_args["preset"],
        "steps": record["steps"],
        "train_minutes": record["train_minutes"],
        "final_loss": record["final_loss"],
        "commit": record.get("commit") or source_commit(),  # the training run's, else this checkout's
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "held_out": held_out_rates(record),
        "held_out_note": "greedy answers on benchmarks/bench_warm_start.py's held-out sets (288 boards per "
        "agent count, sizes 3-8, disjoint from the training boards and the benchmark)",
        "checks": answer_checks(args.out),
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    size = sum(f.stat().st_size for f in args.out.iterdir())
    print(f"packaged {checkpoint} into {args.out} ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
