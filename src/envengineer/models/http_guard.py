"""Bounds on one HTTP request of the openai client: a total deadline and a maximum response size.

The openai client's ``timeout`` bounds each socket operation, not the request: a server that sends one
byte every half second keeps a request alive for ever. And a 0.3 MB gzip body can decode into gigabytes.
:func:`guarded_http_client` builds the client's HTTP layer (``httpx`` or ``httpx2``, whichever the
installed openai uses) with

* a **deadline**: :func:`deadline` sets, for the calling thread, the moment by which the request must be
  done; every connect, write and read on the socket waits at most until then (each socket operation's
  own timeout is clamped to what is left) and fails as a timeout once it has passed, so a drip-feeding
  server cannot stretch a request past its deadline however it paces its bytes (headers included);
* a **size cap**: the body is decoded here (identity, gzip, deflate; any other ``Content-Encoding`` is
  refused), and the request fails with :class:`ResponseTooLarge` as soon as the decoded body passes
  ``max_bytes``, before the rest is read or decompressed.

The backend (:mod:`envengineer.models.openai_backend`) sets the deadline around all attempts of one
request, retries included.
"""

from __future__ import annotations

import importlib
import threading
import time
import urllib.request
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_STATE = threading.local()


class ResponseTooLarge(Exception):
    """The endpoint's response body is larger than the backend accepts."""

    def __init__(self, limit: int, encoding: str) -> None:
        what = "body" if encoding in ("", "identity") else f"{encoding}-decoded body"
        super().__init__(f"response {what} larger than {limit:,} bytes")
        self.limit = limit


class UnsupportedEncoding(Exception):
    """The endpoint compressed its body in a way this backend does not decode under a size cap."""


@contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Requests made by this thread inside the block must finish within ``seconds`` (None: no bound)."""
    previous = getattr(_STATE, "at", None)
    _STATE.at = None if seconds is None else time.monotonic() + seconds
    try:
        yield
    finally:
        _STATE.at = previous


def remaining() -> float | None:
    """Seconds left before this thread's deadline (negative when passed; None without one)."""
    at = getattr(_STATE, "at", None)
    return None if at is None else at - time.monotonic()


def http_modules() -> tuple[Any, Any]:
    """The ``(httpx, httpcore)`` pair the installed openai client is built on (``httpx2`` in newer ones)."""
    import openai

    for cls in type.mro(openai.DefaultHttpxClient):
        root = cls.__module__.split(".")[0]
        if cls.__name__ == "Client" and root in ("httpx", "httpx2"):
            http = importlib.import_module(root)
            return http, importlib.import_module("httpcore2" if root == "httpx2" else "httpcore")
    import httpx  # pragma: no cover - an openai client not built on httpx

    return httpx, importlib.import_module("httpcore")


def guarded_http_client(*, base_url: str | None, max_bytes: int, timeout: float, concurrency: int) -> Any:
    """An ``httpx.Client`` (or ``httpx2.Client``) for ``openai.OpenAI(http_client=...)`` with both bounds."""
    http, core = http_modules()
    limits = http.Limits(max_connections=max(concurrency, 1) * 2, max_keepalive_connections=concurrency)
    inner = http.HTTPTransport(limits=limits, proxy=_env_proxy(base_url))
    pool = getattr(inner, "_pool", None)
    if pool is not None and hasattr(pool, "_network_backend"):
        pool._network_backend = _deadline_backend(core, pool._network_backend)
    transport = _guarded_transport(http, inner, max_bytes)
    return http.Client(transport=transport, timeout=timeout, follow_redirects=True)


def _env_proxy(base_url: str | None) -> str | None:
    """The proxy the environment names for ``base_url`` (a client with its own transport ignores it)."""
    url = base_url or "https://api.openai.com/v1"
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].rsplit(":", 1)[0]
    if urllib.request.proxy_bypass(host):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(scheme) or proxies.get("all")


def _clamp(timeout: float | None, timeout_cls: type[Exception]) -> float | None:
    left = remaining()
    if left is None:
        return timeout
    if left <= 0:
        raise timeout_cls("the request's deadline has passed")
    return left if timeout is None else min(timeout, left)


def _deadline_backend(core: Any, inner: Any) -> Any:
    """A network backend whose every socket operation waits at most until the thread's deadline."""

    class Stream(core.NetworkStream):  # type: ignore[misc,name-defined]
        def __init__(self, stream: Any) -> None:
            self._stream = stream

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return self._stream.read(max_bytes, _clamp(timeout, core.ReadTimeout))

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self._stream.write(buffer, _clamp(timeout, core.WriteTimeout))

        def close(self) -> None:
            self._stream.close()

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: Any = None) -> Any:
            return Stream(
                self._stream.start_tls(ssl_context, server_hostname, _clamp(timeout, core.ConnectTimeout))
            )

        def get_extra_info(self, info: str) -> Any:
            return self._stream.get_extra_info(info)

    class Backend(core.NetworkBackend):  # type: ignore[misc,name-defined]
        def connect_tcp(self, host: str, port: int, timeout: float | None = None, **kw: Any) -> Any:
            return Stream(inner.connect_tcp(host, port, _clamp(timeout, core.ConnectTimeout), **kw))

        def connect_unix_socket(self, path: str, timeout: float | None = None, **kw: Any) -> Any:
            return Stream(inner.connect_unix_socket(path, _clamp(timeout, core.ConnectTimeout), **kw))

        def sleep(self, seconds: float) -> None:
            inner.sleep(seconds)

    return Backend()


def _guarded_transport(http: Any, inner: Any, max_bytes: int) -> Any:
    """A transport that decodes the body itself, under ``max_bytes`` and the thread's deadline."""

    class Body(http.SyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, stream: Any, encoding: str) -> None:
            self._stream = stream
            self._encoding = encoding

        def __iter__(self) -> Iterator[bytes]:
            enc = self._encoding
            decoder = None
            if enc in ("gzip", "x-gzip"):
                decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
            elif enc == "deflate":
                decoder = zlib.decompressobj()
            size = 0
            for chunk in self._stream:
                left = remaining()
                if left is not None and left <= 0:
                    raise http.ReadTimeout("the request's deadline has passed")
                pending = chunk
                while pending:
                    if decoder is None:
                        out, pending = pending, b""
                    else:  # never inflate more than the cap allows in one step (a gzip bomb)
                        out = decoder.decompress(pending, max_bytes + 1 - size)
                        pending = decoder.unconsumed_tail
                    size += len(out)
                    if size > max_bytes:
                        raise ResponseTooLarge(max_bytes, enc)
                    if out:
                        yield out
                    if decoder is not None and not out:
                        break
            if decoder is not None:
                tail = decoder.flush()
                if size + len(tail) > max_bytes:
                    raise ResponseTooLarge(max_bytes, enc)
                if tail:
                    yield tail

        def close(self) -> None:
            self._stream.close()

    class Transport(http.BaseTransport):  # type: ignore[misc,name-defined]
        def handle_request(self, request: Any) -> Any:
            request.headers["Accept-Encoding"] = "gzip, deflate"
            response = inner.handle_request(request)
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("identity", "", "gzip", "x-gzip", "deflate"):
                response.close()
                raise UnsupportedEncoding(f"response Content-Encoding {encoding[:40]!r} is not supported")
            length = response.headers.get("content-length", "")
            if encoding in ("identity", "") and length.isdigit() and int(length) > max_bytes:
                response.close()
                raise ResponseTooLarge(max_bytes, encoding)
            headers = [
                (k, v)
                for k, v in response.headers.multi_items()
                if k.lower() not in ("content-encoding", "content-length")
            ]
            return http.Response(
                status_code=response.status_code,
                headers=headers,
                stream=Body(response.stream, encoding),
                extensions=response.extensions,
            )

        def close(self) -> None:
            inner.close()

    return Transport()
