#!/usr/bin/env bash
# The curriculum comparison from the packaged trainee: 5 arms x the seeds given, in lanes.
#
#   bash benchmarks/run_comparison.sh [SEEDS] [LANES] [OUT]      defaults: "0 1 2 3 4", 2, runs/cmp
#   envengineer compare OUT/cpu-policy-* --against cpu-policy-main-fixed --out OUT/compare
#
# ARMS (default: the four engineered arms) names the arms run beside the fixed one, and SETTINGS adds
# `--set` options to every run, e.g. a longer schedule of two arms:
#   ARMS="main-llm" SETTINGS="--set rounds=5" bash benchmarks/run_comparison.sh "0 1 2" 2 runs/cmp-5rounds
#
# Each seed's fixed arm runs in full; the other four arms of that seed take its starting validation and
# round 0 (the same computation in every arm: the engineer is first asked after round 0) with
# `--share-from`, so they compute rounds 1 and 2 and the benchmark only (docs/loop.md). Each lane is one
# process with one torch thread: LANES processes keep LANES cores busy. A finished run is skipped and a
# stopped one resumed, so the same command continues a stopped comparison.
set -euo pipefail
SEEDS=${1:-"0 1 2 3 4"}
LANES=${2:-2}
OUT=${3:-runs/cmp}
ARMS=${ARMS:-"baseline-threshold baseline-random baseline-learnability main-llm"}
SETTINGS=${SETTINGS:-}
ENVENGINEER=${ENVENGINEER:-envengineer}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OUT ENVENGINEER SETTINGS
mkdir -p "$OUT"

one_run() {  # one_run ARM SEED
  local arm=$1 seed=$2 dir="$OUT/cpu-policy-$1-s$2" fixed="$OUT/cpu-policy-main-fixed-s$2"
  local log="$OUT/log-$arm-s$seed.txt"
  if [ -f "$dir/experiment.yaml" ]; then
    "$ENVENGINEER" run --resume "$dir" --no-progress >>"$log" 2>&1
  elif [ "$arm" = main-fixed ]; then
    # shellcheck disable=SC2086  # SETTINGS holds several words on purpose
    "$ENVENGINEER" run "experiments/cpu/policy-$arm.yaml" --seed "$seed" --out "$dir" $SETTINGS --no-progress \
      >"$log" 2>&1
  else
    # the source's round 0 must be finished (its fixed arm runs first in the queue, maybe in another lane)
    local waited=0
    until grep -q '"round": 0, "stage": "validation", "status": "done"' "$fixed/ledger.jsonl" 2>/dev/null; do
      if [ $waited -ge 7200 ]; then echo "gave up waiting for $fixed's round 0: $dir not run" >&2; return 1; fi
      sleep 20; waited=$((waited + 20))
    done
    # shellcheck disable=SC2086
    "$ENVENGINEER" run "experiments/cpu/policy-$arm.yaml" --seed "$seed" --out "$dir" $SETTINGS \
      --share-from "$fixed" --no-progress >"$log" 2>&1
  fi
}

run_and_say() {  # run_and_say ARM SEED: skipped when finished; a run that ends without its benchmark says so
  local dir="$OUT/cpu-policy-$1-s$2"
  if [ -f "$dir/benchmark/scores.json" ]; then echo "done already: $dir"; return 0; fi
  one_run "$1" "$2" || true
  if [ -f "$dir/benchmark/scores.json" ]; then echo "finished: $dir ($(date +%H:%M))"
  else echo "FAILED: $dir (its log: $OUT/log-$1-s$2.txt)" >&2; fi
}

export -f one_run run_and_say

# every seed's fixed arm first, so no lane waits long for a source; then the other arms seed by seed
{
  for s in $SEEDS; do echo "main-fixed $s"; done
  for s in $SEEDS; do
    for arm in $ARMS; do echo "$arm $s"; done
  done
} | xargs -P "$LANES" -L 1 bash -c 'run_and_say "$0" "$1"'
