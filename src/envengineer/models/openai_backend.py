"""Any OpenAI-compatible chat endpoint: hosted models, a vLLM server, Ollama, llama.cpp's server.

Requests go through the official ``openai`` client, a few at a time (``concurrency`` threads). A request
that fails with a rate limit (429), a server error (5xx), a timeout or a connection error is retried with
exponential backoff (the server's ``Retry-After`` wins when it sends one); one that still fails, or fails
in a way a retry cannot fix (4xx, a malformed body, a body over the size cap), becomes a
:class:`Completion` with ``error`` set. An evaluation therefore never dies of one bad request, and the
failure is on record.

Each request, all its attempts and waits included, has a total ``deadline`` (connect, send, headers and
body: a server that drips bytes cannot stretch it), and its body is capped at ``max_response_bytes``
after decompression (:mod:`envengineer.models.http_guard`).

The API key is read from the environment variable the configuration names (``OPENAI_API_KEY`` by
default). Only the variable's name is kept in the backend's records; the key is registered as a secret
(:mod:`envengineer.sanitize`) and scrubbed from every answer and error, so an endpoint that echoes it
cannot get it written anywhere. A local server needs no key: with ``base_url`` set and the variable
empty, requests carry the placeholder key ``EMPTY``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from envengineer.models.base import Completion, Conversation, ModelError, SamplingParams, check_conversations
from envengineer.models.http_guard import ResponseTooLarge, UnsupportedEncoding, deadline, remaining
from envengineer.sanitize import register_secret, safe_text

log = logging.getLogger(__name__)

#: HTTP statuses worth a retry (the same set the openai client retries).
RETRY_STATUSES = frozenset({408, 409, 429})


class _MalformedResponse(Exception):
    """The endpoint answered 2xx with a body that is not a chat completion."""


class OpenAIBackend:
    """Chat completions from an OpenAI-compatible endpoint.

    Args:
        model: The model name the endpoint serves (e.g. ``gpt-4.1-mini``, ``Qwen/Qwen3-4B``, ``qwen3:4b``).
        base_url: The endpoint's ``/v1`` URL (e.g. ``http://localhost:8000/v1``); ``None`` is OpenAI's
            (or ``$OPENAI_BASE_URL``).
        api_key_env: The environment variable that holds the API key.
        concurrency: Requests in flight at once.
        timeout: Seconds one socket operation (connect, a read, a write) may wait before the attempt is
            abandoned (and retried).
        deadline: Seconds one request may take in all: every attempt, wait and retry included.
        max_response_bytes: Largest response body accepted, after decompression; a larger one is an
            error (not retried).
        max_retries: Retries after the first attempt, for 408/409/429/5xx, timeouts and connection errors.
        backoff: First retry delay in seconds; it doubles on every retry (with jitter).
        backoff_max: Largest delay between two attempts, in seconds.
        enable_thinking: Qwen3's thinking switch, sent as ``chat_template_kwargs`` (vLLM and SGLang
            servers honour it; ``None`` sends nothing).
        extra_body: Extra JSON fields for every request (server-specific options).

    Raises:
        ModelError: Bad option, or no API key for OpenAI's own endpoint.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 8,
        timeout: float = 120.0,
        deadline: float = 600.0,
        max_response_bytes: int = 8 * 2**20,
        max_retries: int = 5,
        backoff: float = 1.0,
        backoff_max: float = 60.0,
        enable_thinking: bool | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        try:
            import openai
        except ImportError:
            raise ModelError(
                "the openai backend needs the openai package; install it with "
                "`pip install 'envengineer[train]'` or `pip install openai`"
            ) from None
        if concurrency < 1:
            raise ModelError(f"concurrency must be >= 1, got {concurrency}")
        if timeout <= 0:
            raise ModelError(f"timeout must be > 0 seconds, got {timeout}")
        if not deadline > 0:
            raise ModelError(f"deadline must be > 0 seconds, got {deadline}")
        if max_response_bytes < 1024:
            raise ModelError(f"max_response_bytes must be >= 1024, got {max_response_bytes}")
        if max_retries < 0:
            raise ModelError(f"max_retries must be >= 0, got {max_retries}")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", api_key_env or ""):
            raise ModelError(
                f"api_key_env must be an environment variable name like OPENAI_API_KEY, got {api_key_env!r}"
            )
        key = os.environ.get(api_key_env, "")
        if not key:
            if base_url is None and not os.environ.get("OPENAI_BASE_URL"):
                raise ModelError(
                    f"no API key: set ${api_key_env}, name another variable with --api-key-env, "
                    "or point --base-url at a local server"
                )
            log.info("$%s is empty; requests to %s carry no API key", api_key_env, base_url)
            key = "EMPTY"
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.concurrency = concurrency
        self.timeout = timeout
        self.deadline = float(deadline)
        self.max_response_bytes = int(max_response_bytes)
        self.max_retries = max_retries
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.enable_thinking = enable_thinking
        self.extra_body = dict(extra_body or {})
        self.name = f"openai:{model}"
        self._secret = key if key != "EMPTY" else None
        register_secret(self._secret)
        from envengineer.models.http_guard import guarded_http_client

        http_client = guarded_http_client(
            base_url=base_url, max_bytes=self.max_response_bytes, timeout=timeout, concurrency=concurrency
        )
        self._client = openai.OpenAI(
            api_key=key, base_url=base_url, timeout=timeout, max_retries=0, http_client=http_client
        )

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Completion]:
        """Send every conversation (``concurrency`` at a time); results come back in order."""
        if not conversations:
            return []
        check_conversations(conversations)
        workers = min(self.concurrency, len(conversations))
        if workers == 1:
            return [self._complete(c, params) for c in conversations]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="openai") as pool:
            return list(pool.map(lambda c: self._complete(c, params), conversations))

    # -- one request -----------------------------------------------------------------------------------
    def _request(self, conversation: Conversation, params: SamplingParams) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in conversation],
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
            "seed": params.seed,
        }
        if params.json_schema is not None:
            name = re.sub(r"[^A-Za-z0-9_-]", "_", str(params.json_schema.get("title", "response")))[:64]
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name or "response", "schema": params.json_schema},
            }
        body = dict(self.extra_body)
        if self.enable_thinking is not None:
            body.setdefault("chat_template_kwargs", {})["enable_thinking"] = self.enable_thinking
        if body:
            kwargs["extra_body"] = body
        return kwargs

    def _complete(self, conversation: Conversation, params: SamplingParams) -> Completion:
        with deadline(self.deadline):
            return self._attempts(conversation, params)

    def _attempts(self, conversation: Conversation, params: SamplingParams) -> Completion:
        kwargs = self._request(conversation, params)
        rng = np.random.default_rng()
        attempt = 0
        before = None  # the previous attempt's failure, kept for when the deadline cuts the next one off
        while True:
            try:
                response = self._client.chat.completions.create(**kwargs)
                completion = _parse(response)
                return Completion(
                    self._scrub(completion.text), completion_tokens=completion.completion_tokens
                )
            except Exception as exc:
                retry, wait_hint = _classify(exc)
                left = remaining()
                why = _short(exc)
                if left is not None and left <= 0:
                    if before is not None and before != why:
                        why = f"{why}; the attempt before: {before}"
                    return self._failed(f"deadline of {self.deadline:g} s passed ({why})", attempt)
                before = why
                if not retry or attempt >= self.max_retries:
                    return self._failed(why, attempt)
                delay = min(self.backoff_max, self.backoff * 2.0**attempt) * float(rng.uniform(0.5, 1.0))
                if wait_hint is not None:
                    delay = min(self.backoff_max, max(delay, wait_hint))
                if left is not None and delay >= left:
                    reason = f"deadline of {self.deadline:g} s leaves no time for a retry ({why})"
                    return self._failed(reason, attempt)
                log.info(
                    "%s: %s; retry %d/%d in %.2f s",
                    self.name,
                    self._scrub(why),
                    attempt + 1,
                    self.max_retries,
                    delay,
                )
                time.sleep(delay)
                attempt += 1

    def _failed(self, reason: str, attempt: int) -> Completion:
        attempts = attempt + 1
        message = self._scrub(f"{reason} (after {attempts} attempt{'s' if attempts > 1 else ''})")
        log.warning("%s: request failed: %s", self.name, message)
        return Completion("", error=message)

    def _scrub(self, text: str) -> str:
        """Remove the API key (and every other known secret) from a text, and lone surrogates."""
        text = text.replace(self._secret, "***") if self._secret else text
        return safe_text(text)

    def __repr__(self) -> str:
        return (
            f"OpenAIBackend(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key_env={self.api_key_env!r}, concurrency={self.concurrency})"
        )


def _parse(response: Any) -> Completion:
    if isinstance(response, (str, bytes)):
        raise _MalformedResponse(f"body is not a chat completion: {str(response)[:120]!r}")
    choices = getattr(response, "choices", None)
    if not choices:
        raise _MalformedResponse("body has no 'choices'")
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if not isinstance(content, str):
        reason = getattr(choices[0], "finish_reason", None)
        raise _MalformedResponse(f"choice has no text content (finish_reason={reason!r})")
    usage = getattr(response, "usage", None)
    tokens = getattr(usage, "completion_tokens", None)
    return Completion(content, completion_tokens=int(tokens) if isinstance(tokens, int) else None)


def _classify(exc: BaseException) -> tuple[bool, float | None]:
    """Whether a failed request is worth retrying, and the server's ``Retry-After`` in seconds if any."""
    import openai

    if _cause(exc, (ResponseTooLarge, UnsupportedEncoding)) is not None:
        return False, None  # the same request would get the same body
    if isinstance(exc, openai.APIConnectionError):  # includes timeouts
        return True, None
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retry = status in RETRY_STATUSES or status >= 500
        hint = None
        try:
            value = exc.response.headers.get("retry-after")
            hint = float(value) if value is not None else None
        except (AttributeError, TypeError, ValueError):
            hint = None
        return retry, hint
    return False, None


def _short(exc: BaseException) -> str:
    import openai

    if isinstance(exc, _MalformedResponse):
        return f"malformed response: {exc}"
    bounded = _cause(exc, (ResponseTooLarge, UnsupportedEncoding))
    if bounded is not None:
        return str(bounded)
    if isinstance(exc, json.JSONDecodeError):
        return f"malformed response: body is not JSON ({exc.msg} at char {exc.pos})"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code} {type(exc).__name__}: {str(exc)[:300]}"
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return f"connection error: {str(cause)[:200]}"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def _cause(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> BaseException | None:
    """``exc`` or the first exception of ``kinds`` in its cause/context chain (the client wraps errors)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kinds):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
