#!/usr/bin/env bash
# One short loop round through the real subprocess path, to prove the GPU path in one run (<= 10 minutes on
# one GPU, no internet): the embedded SmolLM2-135M, 2 GRPO steps of the grpo-gpu preset (vLLM colocate) under
# `accelerate launch`, validation and an 8-instance benchmark in their own vLLM process. Prints the GRPO step
# time, the peak GPU memory and the validation rates. Usage (from anywhere):
#   bash scripts/gpu_check.sh            # GPU when torch sees one, else the same path on the CPU
#   bash scripts/gpu_check.sh --cpu      # force the CPU path (cpu preset, hf backend, python launcher)
#   bash scripts/gpu_check.sh --out DIR  # keep the run directory (default: a temporary one)
# Needs the train and gpu extras and the embedded model (scripts/install.sh), nothing from the network.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
MODE=auto
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) MODE=cpu ;;
        --gpu) MODE=gpu ;;
        --out) OUT="$2"; shift ;;
        *) echo "usage: $0 [--cpu|--gpu] [--out DIR]" >&2; exit 2 ;;
    esac
    shift
done
if [ "$MODE" = auto ]; then
    if "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        MODE=gpu
    else
        MODE=cpu
    fi
fi
WORK=$(mktemp -d)
trap 'kill "${POLL:-}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
OUT=${OUT:-$WORK/run}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1

if [ "$MODE" = gpu ]; then
    SETTINGS='training: {preset: gpu, max_steps: 2}
evaluation: {backend: vllm, batch_size: 64, max_new_tokens: 256, max_model_len: 2048,
             gpu_memory_utilization: 0.5, temperature: 0.0, benchmark_limit: 8}
launch: {stages: subprocess, processes: 1, accelerate_config: configs/accelerate/single_gpu.yaml,
         evaluation: subprocess, retries: 0}'
else
    SETTINGS='training: {preset: cpu, max_steps: 1}
evaluation: {backend: hf, batch_size: 8, max_new_tokens: 32, temperature: 0.0, benchmark_limit: 8}
launch: {stages: subprocess, processes: 1, evaluation: subprocess, retries: 0}'
fi
cat > "$WORK/check.yaml" <<YAML
name: gpu-check-$MODE
description: One short round through the subprocess stages (scripts/gpu_check.sh).
model: null
rounds: 1
samples_per_round: 16
epochs_per_round: 1
num_agents: 2
validation: {per_cell: 1, seed: 1, agents: [3], limit: 8}
engineer: {kind: fixed}
$SETTINGS
YAML

echo "gpu_check: $MODE path, run directory $OUT"
if [ "$MODE" = gpu ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$WORK/gpu_mem.txt" &
    POLL=$!
fi
T0=$(date +%s)
timeout 600 "$PY" -m envengineer.cli run "$WORK/check.yaml" --out "$OUT" --no-report --no-progress
T1=$(date +%s)
kill "${POLL:-}" 2>/dev/null || true

"$PY" - "$OUT" "$WORK/gpu_mem.txt" "$((T1 - T0))" <<'PYTHON'
import json, sys
from pathlib import Path

out, mem_file, seconds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
train = json.loads((out / "round_00" / "train" / "metrics.json").read_text())
child = train.get("metrics", {})
timing, memory = child.get("timing", {}), child.get("memory", {})
val = json.loads((out / "round_00" / "validation" / "scores.json").read_text())["summary"]
bench = json.loads((out / "benchmark" / "scores.json").read_text())["summary"]
print(f"GRPO steps:          {train['steps']}, {timing.get('step_s_mean')} s per step (mean; "
      f"steps {timing.get('step_s')})")
print(f"training command:    {child.get('command')}")
print(f"peak memory (train): GPU reserved by torch {memory.get('gpu_reserved_gb')} GB, RSS {memory.get('rss_gb')} GB")
if mem_file.exists() and mem_file.read_text().split():
    used = [int(x.split(",")[0]) for x in mem_file.read_text().split()]
    print(f"peak GPU memory:     {max(used) / 1024:.2f} GiB (nvidia-smi, every stage of the run)")
print(f"validation:          n {val['n']}, valid {val['valid']:.2f} %, optimal {val['optimal']:.2f} %")
print(f"benchmark (subset):  n {bench['n']}, valid {bench['valid']:.2f} %, optimal {bench['optimal']:.2f} %")
print(f"wall time:           {seconds} s")
PYTHON
echo "gpu_check: OK"
