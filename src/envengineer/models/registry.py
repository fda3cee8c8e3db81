"""Backends found by name: ``load_backend(kind, model, **options)``.

The registry names each backend's module and class as text and imports the module only when that backend
is built, so importing it pulls in neither torch nor openai, and no backend imports the registry back.

>>> BACKENDS
('hf', 'vllm', 'openai', 'scripted')
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from envengineer.models.base import ChatBackend, ModelError
from envengineer.models.embedded import resolve_model

#: Backend kinds in the order the CLI lists them.
BACKENDS: tuple[str, ...] = ("hf", "vllm", "openai", "scripted")

#: Where each backend kind lives: ``(module, class)``.
REGISTRY: dict[str, tuple[str, str]] = {
    "scripted": ("envengineer.models.scripted", "ScriptedBackend"),
    "hf": ("envengineer.models.hf", "HFBackend"),
    "openai": ("envengineer.models.openai_backend", "OpenAIBackend"),
    "vllm": ("envengineer.models.vllm_backend", "VLLMBackend"),
}


def backend_class(kind: str) -> Any:
    """The class of backend ``kind``, its module imported now.

    Raises:
        ModelError: Unknown kind.
    """
    if kind not in REGISTRY:
        raise ModelError(f"unknown backend {kind!r}; use one of {', '.join(BACKENDS)}")
    module, name = REGISTRY[kind]
    return getattr(importlib.import_module(module), name)


def load_backend(kind: str, model: str | None = None, **options: Any) -> ChatBackend:
    """Build a chat backend by kind.

    Args:
        kind: ``hf`` (transformers), ``vllm``, ``openai`` (any OpenAI-compatible endpoint) or ``scripted``
            (the testbed's reference policies).
        model: For ``hf``/``vllm``: a local folder, a hub id, or ``None``/``"embedded"`` for the embedded
            SmolLM2-135M-Instruct. For ``openai``: the served model's name. For ``scripted``: the policy,
            ``optimal`` (default), ``greedy`` or ``random``.
        **options: Keyword arguments of the backend class (e.g. ``base_url``, ``concurrency`` for
            ``openai``; ``device``, ``enable_thinking`` for ``hf``; ``instances`` for ``scripted``).

    Returns:
        A :class:`ChatBackend`.

    Raises:
        ModelError: Unknown kind or option, missing package, or a model that cannot be loaded.
    """
    cls = backend_class(kind)
    accepted = [
        name
        for name, p in inspect.signature(cls).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "model"
    ]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ModelError(f"backend {kind!r} has no option(s) {unknown}; it accepts {accepted}")
    if kind == "scripted":
        return cls(model or "optimal", **options)
    if kind == "openai":
        if not model:
            raise ModelError("the openai backend needs --model: the model name the endpoint serves")
        return cls(model, **options)
    return cls(resolve_model(model), **options)
