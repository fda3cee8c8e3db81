"""Text on its way to disk or a log: always valid UTF-8, never a secret the process holds.

Two faults a model (or an endpoint) can cause when its text is written as it came:

* a lone surrogate (``"\\ud800"`` in a JSON answer decodes to one) cannot be encoded as UTF-8, so the
  write raises and the same write fails again on resume; :func:`replace_surrogates` replaces each one by
  U+FFFD and says how many it replaced;
* an endpoint that echoes the request (or a model that was shown a key) puts the API key into the
  answer; :func:`scrub` replaces every known secret by ``***``.

A secret is known when it was registered (:func:`register_secret`, e.g. by the OpenAI backend for the
key it reads) or when it is the value of an environment variable whose name ends in ``_KEY``,
``_TOKEN``, ``_SECRET`` or ``_PASSWORD`` (``OPENAI_API_KEY``, ``HF_TOKEN``, ...). Values shorter than
:data:`MIN_SECRET_LENGTH` characters are not treated as secrets (``EMPTY``, ``1``): replacing them would
garble ordinary text and protect nothing.

>>> replace_surrogates("ok \\ud800 ok")
('ok \\ufffd ok', 1)
>>> register_secret("sk-example-0123456789")
>>> scrub("key=sk-example-0123456789")
'key=***'
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any

#: Shortest value treated as a secret.
MIN_SECRET_LENGTH = 8
#: Names of environment variables whose values are secrets.
SECRET_ENV_NAME = re.compile(r"(?:^|_)(?:KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
REDACTED = "***"

_SURROGATE = re.compile("[\ud800-\udfff]")
_registered: set[str] = set()
_lock = threading.Lock()


def replace_surrogates(text: str) -> tuple[str, int]:
    """``text`` with every lone surrogate replaced by U+FFFD, and how many were replaced."""
    if not _SURROGATE.search(text):
        return text, 0
    return _SURROGATE.subn("\ufffd", text)


def register_secret(value: str | None) -> None:
    """Treat ``value`` as a secret from now on (ignored when shorter than :data:`MIN_SECRET_LENGTH`)."""
    if value and len(value) >= MIN_SECRET_LENGTH:
        with _lock:
            _registered.add(value)


def known_secrets() -> list[str]:
    """Every secret :func:`scrub` removes, longest first (so a secret inside another goes with it)."""
    with _lock:
        found = set(_registered)
    for name, value in os.environ.items():
        if value and len(value) >= MIN_SECRET_LENGTH and SECRET_ENV_NAME.search(name):
            found.add(value)
    return sorted(found, key=len, reverse=True)


def scrub(text: str) -> str:
    """``text`` with every known secret replaced by ``***``."""
    for secret in known_secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def safe_text(text: str) -> str:
    """What may be written: secrets scrubbed, lone surrogates replaced."""
    return replace_surrogates(scrub(text))[0]


def scrub_data(obj: Any) -> Any:
    """A copy of JSON-like data with every string (keys too) passed through :func:`safe_text`."""
    if isinstance(obj, str):
        return safe_text(obj)
    if isinstance(obj, dict):
        return {scrub_data(k): scrub_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub_data(v) for v in obj]
    return obj


class ScrubFilter(logging.Filter):
    """A logging filter (for a handler) that scrubs secrets from every record's message.

    The message is formatted once, scrubbed, and stored without arguments, so neither the format string
    nor an argument can carry a secret to the handler.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to logging's own error path
            return True
        cleaned = safe_text(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, ()
        return True
