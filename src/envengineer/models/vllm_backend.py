"""vLLM offline inference where a GPU is present (the optional ``gpu`` extra).

``vllm`` is imported when a backend is built, never before, so the package and its CLI stay usable
without it. ``SamplingParams.json_schema`` becomes vLLM's structured-output (guided decoding) request.
For generation *during* GRPO training use TRL's own vLLM integration (``use_vllm`` in the GRPO preset),
not this backend.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from envengineer.models.base import Completion, Conversation, ModelError, SamplingParams, check_conversations
from envengineer.models.policy_folder import check_model_folder

log = logging.getLogger(__name__)


def import_vllm() -> Any:
    """Import vLLM or raise a :class:`ModelError` that names the extra to install."""
    try:
        import vllm
    except ImportError as exc:
        raise ModelError(
            f"the vllm backend needs vLLM, which is not installed ({exc}); install the gpu extra "
            "on a CUDA machine: `pip install 'envengineer[gpu]'`, or use --backend hf"
        ) from None
    return vllm


class VLLMBackend:
    """Chat completions from a vLLM engine in this process.

    Args:
        model: A local checkpoint folder or a hub id (already resolved).
        tensor_parallel_size: GPUs to shard the model over.
        gpu_memory_utilization: Share of GPU memory vLLM may take.
        dtype: ``"auto"``, ``"bfloat16"``, ``"float16"`` or ``"float32"``.
        max_model_len: Context length cap (``None``: the model's).
        enable_thinking: Qwen3's thinking switch, passed to the chat template; ``None`` keeps its default.
        seed: Engine seed.

    Raises:
        ModelError: vLLM is not installed.
        ConfigError: A damaged local folder (:func:`~envengineer.models.policy_folder.check_model_folder`).
    """

    def __init__(
        self,
        model: str,
        *,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        dtype: str = "auto",
        max_model_len: int | None = None,
        enable_thinking: bool | None = None,
        seed: int = 0,
    ) -> None:
        vllm = import_vllm()
        check_model_folder(model)
        kwargs: dict[str, Any] = {
            "model": model,
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "dtype": dtype,
            "seed": seed,
        }
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        self._vllm = vllm
        self._llm = vllm.LLM(**kwargs)
        self.enable_thinking = enable_thinking
        self.name = f"vllm:{model}"

    def _sampling(self, params: SamplingParams) -> Any:
        kwargs: dict[str, Any] = {
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
            "seed": params.seed,
        }
        if params.json_schema is not None:
            kwargs.update(_structured(params.json_schema))
        return self._vllm.SamplingParams(**kwargs)

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Completion]:
        """Complete a batch of conversations with ``LLM.chat`` (vLLM schedules the batch itself)."""
        if not conversations:
            return []
        check_conversations(conversations)
        chat_kwargs: dict[str, Any] = {}
        if self.enable_thinking is not None:
            chat_kwargs["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        outputs = self._llm.chat(
            [list(c) for c in conversations], self._sampling(params), use_tqdm=False, **chat_kwargs
        )
        result = []
        for out in outputs:
            if not out.outputs:
                result.append(Completion("", error="vllm returned no output"))
                continue
            first = out.outputs[0]
            result.append(Completion(first.text, completion_tokens=len(first.token_ids)))
        return result

    def __repr__(self) -> str:
        return f"VLLMBackend(name={self.name!r})"


def _structured(schema: dict[str, Any]) -> dict[str, Any]:
    """The SamplingParams field for JSON-schema constrained decoding, in the installed vLLM's spelling."""
    try:  # vLLM >= 0.10.2
        from vllm.sampling_params import StructuredOutputsParams

        return {"structured_outputs": StructuredOutputsParams(json=schema)}
    except ImportError:
        pass
    try:  # older vLLM
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(json=schema)}
    except ImportError:
        log.warning("this vLLM offers no structured outputs; json_schema is ignored")
        return {}
