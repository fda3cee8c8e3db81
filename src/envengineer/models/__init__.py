"""Chat backends behind one small interface: scripted, hf (transformers), vllm, openai; the embedded model.

Importing this package is cheap: torch, transformers, vllm and openai are imported only when a backend
that needs them is built.

>>> backend_kinds = BACKENDS
>>> backend_kinds
('hf', 'vllm', 'openai', 'scripted')
"""

from __future__ import annotations

from envengineer.models.base import ChatBackend, Completion, Conversation, ModelError, SamplingParams
from envengineer.models.embedded import embedded_model_path, resolve_model
from envengineer.models.registry import BACKENDS, load_backend

__all__ = [
    "BACKENDS",
    "ChatBackend",
    "Completion",
    "Conversation",
    "ModelError",
    "SamplingParams",
    "embedded_model_path",
    "load_backend",
    "resolve_model",
]
