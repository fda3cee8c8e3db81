"""The OpenAI-compatible backend against a real HTTP server on loopback: canned answers, 429s, 5xx, junk."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")

from envengineer.models import Completion, ModelError, SamplingParams, load_backend
from envengineer.models.openai_backend import OpenAIBackend

SECRET = "sk-test-DO-NOT-LEAK-0123456789abcdef"
KEY_ENV = "ENVENGINEER_TEST_API_KEY"


class FakeServer:
    """A chat-completions endpoint whose behaviour is chosen by the last user message.

    ``ok:<text>`` answers ``<text>``; ``flaky429:<n>`` answers 429 the first ``n`` times, then succeeds;
    ``down`` always answers 500; ``garbage`` answers 200 with a body that is not JSON; ``nochoices``
    answers 200 with JSON that is not a completion; ``badrequest`` answers 400; ``slow:<s>`` sleeps ``s``
    seconds before answering.
    """

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.auth: list[str] = []
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                prompt = body["messages"][-1]["content"]
                with server.lock:
                    server.calls[prompt] += 1
                    count = server.calls[prompt]
                    server.auth.append(self.headers.get("Authorization", ""))
                    server.bodies.append(body)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._answer(prompt, count, body)
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _answer(self, prompt: str, count: int, body: dict[str, Any]) -> None:
                if prompt.startswith("ok:"):
                    return self._json(200, _completion(prompt[3:], body["model"]))
                if prompt.startswith("flaky429:"):
                    if count <= int(prompt.split(":")[1]):
                        return self._json(
                            429,
                            {"error": {"message": "slow down", "type": "rate_limit"}},
                            headers={"Retry-After": "0"},
                        )
                    return self._json(200, _completion("finally", body["model"]))
                if prompt == "down":
                    return self._json(500, {"error": {"message": "boom", "type": "server_error"}})
                if prompt == "garbage":
                    return self._raw(200, b"this is {not json", "application/json")
                if prompt == "nochoices":
                    return self._json(200, {"id": "x", "object": "chat.completion"})
                if prompt == "badrequest":
                    return self._json(
                        400, {"error": {"message": "bad model", "type": "invalid_request_error"}}
                    )
                if prompt.startswith("slow:"):
                    time.sleep(float(prompt.split(":")[1]))
                    return self._json(200, _completion("late", body["model"]))
                return self._json(404, {"error": {"message": "unknown test prompt"}})

            def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
                self._raw(status, json.dumps(data).encode(), "application/json", headers)

            def _raw(
                self, status: int, payload: bytes, ctype: str, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _completion(text: str, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 5,
            "completion_tokens": len(text.split()),
            "total_tokens": 5 + len(text.split()),
        },
    }


def _conv(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as s:
        yield s


@pytest.fixture
def backend(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> OpenAIBackend:
    monkeypatch.setenv(KEY_ENV, SECRET)
    b = load_backend(
        "openai",
        "test-model",
        base_url=server.url,
        api_key_env=KEY_ENV,
        concurrency=4,
        timeout=5.0,
        max_retries=3,
        backoff=0.01,
        backoff_max=0.05,
    )
    assert isinstance(b, OpenAIBackend)
    return b


def test_canned_completions_in_order(server: FakeServer, backend: OpenAIBackend) -> None:
    texts = [f"ok:answer {i}" for i in range(10)]
    out = backend.generate([_conv(t) for t in texts], SamplingParams(max_new_tokens=32, seed=3))
    assert [c.text for c in out] == [f"answer {i}" for i in range(10)]
    assert all(c.error is None and c.completion_tokens == 2 for c in out)
    body = server.bodies[0]
    assert body["model"] == "test-model" and body["max_tokens"] == 32 and body["seed"] == 3
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    assert "response_format" not in body
    assert set(server.auth) == {f"Bearer {SECRET}"}  # the key is sent, and only in the header


def test_429_is_retried_then_succeeds(server: FakeServer, backend: OpenAIBackend) -> None:
    [c] = backend.generate([_conv("flaky429:2")], SamplingParams())
    assert c == Completion("finally", completion_tokens=1, error=None)
    assert server.calls["flaky429:2"] == 3  # two 429s, then success


def test_too_many_429s_becomes_an_error_record(server: FakeServer, backend: OpenAIBackend) -> None:
    [c] = backend.generate([_conv("flaky429:10")], SamplingParams())
    assert c.text == "" and c.error is not None and "429" in c.error and "4 attempts" in c.error
    assert server.calls["flaky429:10"] == 4  # 1 + max_retries


def test_5xx_retried_then_recorded(server: FakeServer, backend: OpenAIBackend) -> None:
    out = backend.generate([_conv("down"), _conv("ok:fine")], SamplingParams())
    assert out[0].error is not None and "500" in out[0].error
    assert out[1] == Completion("fine", completion_tokens=1)
    assert server.calls["down"] == 4


@pytest.mark.parametrize("prompt", ["garbage", "nochoices"])
def test_malformed_body_is_an_error_not_an_exception(
    server: FakeServer, backend: OpenAIBackend, prompt: str
) -> None:
    [c] = backend.generate([_conv(prompt)], SamplingParams())
    assert c.text == "" and c.error is not None and c.error.startswith("malformed response")
    assert server.calls[prompt] == 1  # not retried: a retry cannot fix a malformed body


def test_4xx_is_not_retried(server: FakeServer, backend: OpenAIBackend) -> None:
    [c] = backend.generate([_conv("badrequest")], SamplingParams())
    assert c.error is not None and "400" in c.error
    assert server.calls["badrequest"] == 1


def test_timeout_is_retried_and_recorded(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    b = OpenAIBackend("m", base_url=server.url, api_key_env=KEY_ENV, timeout=0.2, max_retries=1, backoff=0.01)
    [c] = b.generate([_conv("slow:1.0")], SamplingParams())
    assert c.error is not None and "timeout" in c.error
    assert server.calls["slow:1.0"] == 2


def test_connection_refused_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(KEY_ENV, SECRET)
    b = OpenAIBackend(
        "m", base_url=f"http://127.0.0.1:{port}/v1", api_key_env=KEY_ENV, max_retries=2, backoff=0.01
    )
    [c] = b.generate([_conv("ok:x")], SamplingParams())
    assert c.error is not None and "connection" in c.error.lower()


def test_concurrency_limit_is_respected(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    b = OpenAIBackend("m", base_url=server.url, api_key_env=KEY_ENV, concurrency=3)
    out = b.generate([_conv("slow:0.2") for _ in range(9)], SamplingParams())
    assert all(c.text == "late" for c in out)
    assert 2 <= server.max_in_flight <= 3


def test_json_schema_becomes_response_format(server: FakeServer, backend: OpenAIBackend) -> None:
    schema = {"title": "Round Config", "type": "object", "properties": {"a": {"type": "integer"}}}
    backend.generate([_conv("ok:{}")], SamplingParams(json_schema=schema))
    fmt = server.bodies[-1]["response_format"]
    assert fmt == {"type": "json_schema", "json_schema": {"name": "Round_Config", "schema": schema}}


def test_enable_thinking_goes_to_chat_template_kwargs(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    b = OpenAIBackend("m", base_url=server.url, api_key_env=KEY_ENV, enable_thinking=False)
    b.generate([_conv("ok:x")], SamplingParams())
    assert server.bodies[-1]["chat_template_kwargs"] == {"enable_thinking": False}


def test_key_never_in_logs_records_or_repr(
    server: FakeServer, backend: OpenAIBackend, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    out = backend.generate(
        [_conv(p) for p in ("ok:x", "flaky429:1", "down", "garbage", "badrequest")], SamplingParams()
    )
    assert any(c.error for c in out)
    assert SECRET not in caplog.text
    assert any("retry" in r.getMessage() for r in caplog.records)  # the retries were logged ...
    assert SECRET not in repr(backend) and KEY_ENV in repr(backend)
    for c in out:
        assert SECRET not in repr(c)


def test_evaluation_through_openai_keeps_failures_as_records(
    server: FakeServer, backend: OpenAIBackend, tmp_path: Path
) -> None:
    """A whole evaluation survives failing requests; the key is written nowhere in the run folder."""
    prompt_mod = pytest.importorskip("envengineer.mapf.prompt")
    from envengineer.evaluation import evaluate
    from envengineer.mapf.instance import Instance

    grid = ("...", "...", "...")
    instances = [Instance(f"i{k}", grid, ((0, 0), (2, k)), ((0, 2), (0, 0)), 6, 4, 4) for k in range(3)]
    instances += [Instance(f"j{k}", grid, ((1, 0), (2, k)), ((1, 2), (0, 0)), 6, 4, 4) for k in range(3)]
    failing = {prompt_mod.build_prompt(inst) for inst in instances[::2]}

    class Router:
        """Sends every other instance to the failing route of the server, the rest to a canned answer."""

        name = "router"

        def generate(
            self, conversations: list[list[dict[str, str]]], params: SamplingParams
        ) -> list[Completion]:
            routed = [
                _conv("down" if c[-1]["content"] in failing else "ok:<answer>A0: WAIT</answer>")
                for c in conversations
            ]
            return backend.generate(routed, params)

    report = evaluate(Router(), instances, out_dir=tmp_path, progress=False, batch_size=4)
    lines = [json.loads(x) for x in (tmp_path / "responses.jsonl").read_text().splitlines()]
    assert sorted(rec["id"] for rec in lines) == sorted(inst.id for inst in instances)
    assert sum(rec["error"] is not None for rec in lines) == len(failing) == 3
    assert report.summary()["n"] == len(instances)
    for f in tmp_path.iterdir():
        assert SECRET not in f.read_text()


def test_missing_key_for_hosted_openai_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ModelError, match=KEY_ENV):
        OpenAIBackend("gpt-x", api_key_env=KEY_ENV)


def test_local_server_needs_no_key(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    b = OpenAIBackend("m", base_url=server.url, api_key_env=KEY_ENV)
    assert b.generate([_conv("ok:y")], SamplingParams())[0].text == "y"


def test_bad_options_are_model_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    with pytest.raises(ModelError, match="concurrency"):
        OpenAIBackend("m", base_url="http://127.0.0.1:1/v1", api_key_env=KEY_ENV, concurrency=0)
    with pytest.raises(ModelError, match="api_key_env"):
        OpenAIBackend("m", base_url="http://127.0.0.1:1/v1", api_key_env="not a name")
    with pytest.raises(ModelError, match="needs --model"):
        load_backend("openai", None, base_url="http://127.0.0.1:1/v1")
