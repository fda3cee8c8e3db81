"""The demo experiments ``envengineer run --demo`` runs (CPU scale; ``--smollm2`` for the embedded model)."""

from __future__ import annotations

from typing import Any

from envengineer.loop.experiment import Experiment


def demo_experiment(*, smollm2: bool = False) -> Experiment:
    """The CPU demo (``envengineer demo``), ending with the report.

    By default the small-policy loop (``experiments/cpu/demo.yaml``): the packaged trainee
    (``policy:trainee``), 3 supervised rounds on the solver's plans of the engineer's boards, the embedded
    SmolLM2-135M as the engineer (its proposals inside a trust region).
    With ``smollm2`` the SmolLM2 self-engineer loop (``experiments/cpu/demo-smollm2.yaml``, about 10
    minutes), which shows the paper's arrangement running but not learning at this scale.
    """
    return Experiment.model_validate(DEMO_SMOLLM2 if smollm2 else DEMO)


#: The demo's settings (kept equal to ``experiments/cpu/demo.yaml`` by a test): exactly the small-policy
#: comparison's LLM-engineer arm (``experiments/cpu/policy-main-llm.yaml``, its seed 0: 288 validation
#: boards, a stratified fifth of the benchmark, 630 instances), aimed at 10 minutes on 2 idle cores
#: (docs/loop.md has the measured times, which depend on the machine): the packaged trainee, three rounds of
#: 150 supervised steps on the solver's plans of the engineer's boards.
DEMO: dict[str, Any] = {
    "name": "cpu-demo",
    "description": "The small-policy loop on a CPU: the packaged trainee (a 1M-parameter policy supervised "
    "on the solver's plans) trains for 3 rounds on the solver's plans of the engineer's boards, and after "
    "rounds 0 and 1 the embedded SmolLM2-135M reads its validation failures and writes the next round's "
    "configuration (context V6 + L, trust region).",
    "model": "policy:trainee",
    "rounds": 3,
    "samples_per_round": 4800,
    "epochs_per_round": 1,
    "num_agents": 2,
    "training": {"learner": "sft", "preset": "sft-round", "agents": [2, 3]},
    "warm_start": {  # from scratch instead: model policy:tiny and warm_start.enabled true
        "enabled": False,
        "preset": "sft-small",
        "samples": 48000,
        "max_steps": 1500,
        "sizes": [3, 4, 5, 6],
        "hole_ratio": 0.25,
        "wait_ratio": 0.5,
        "agents": [2, 3],
        "seed": 0,
        "cache": True,
    },
    "validation": {"per_cell": 6, "seed": 1, "agents": [2, 3], "min_size": 3, "max_size": 10, "start": True},
    "evaluation": {
        "backend": "hf",
        "batch_size": 64,
        "max_new_tokens": 416,
        "temperature": 0.0,
        "benchmark_per_cell": 10,
    },
    "engineer": {
        "kind": "base",
        "model": "embedded",
        "context": {"variant": "V6", "L": True},
        "trust_region": {"data_ratio": 0.2, "hole_ratio": 0.1, "wait_ratio": 0.25},
        "retries": 2,
        "max_new_tokens": 512,
    },
    "seeds": {"config": 0, "data": 0, "training": 0, "evaluation": 0},
}

#: The SmolLM2 self-engineer demo (kept equal to ``experiments/cpu/demo-smollm2.yaml`` by a test).
DEMO_SMOLLM2: dict[str, Any] = {
    "name": "cpu-demo-smollm2",
    "description": "The whole loop on a CPU: the embedded model trains for 3 short GRPO rounds and, after "
    "rounds 0 and 1, writes the next round's configuration itself (self-engineer, context V6).",
    "rounds": 3,
    "samples_per_round": 16,
    "epochs_per_round": 1,
    "num_agents": 2,
    "training": {"preset": "cpu", "max_steps": 2},
    "validation": {"per_cell": 1, "seed": 1, "agents": [3], "max_size": 10, "limit": 8},
    "evaluation": {"batch_size": 8, "max_new_tokens": 160, "temperature": 0.0, "benchmark_limit": 21},
    "engineer": {"kind": "self", "context": "V6", "retries": 1, "max_new_tokens": 512},
    "seeds": {"config": 0, "data": 0, "training": 0, "evaluation": 0},
}
