"""A total deadline and a response size cap per request, against real hostile servers on loopback."""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("openai")

from envengineer.models import ModelError, SamplingParams
from envengineer.models.openai_backend import OpenAIBackend

KEY_ENV = "ENVENGINEER_TEST_LIMITS_KEY"


def _completion(text: str) -> bytes:
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()


class Hostile:
    """An endpoint whose behaviour is the last user message: drip-body, drip-headers, big, bomb, ..."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.mode: str | None = None  # when set, the behaviour for every prompt
        self.bomb = gzip.compress(b"0" * 20_000_000, 9)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                prompt = server.mode or body["messages"][-1]["content"]
                server.calls[prompt] += 1
                try:
                    self._answer(prompt)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up, as it should

            def _send(self, payload: bytes, headers: dict[str, str], *, length: bool = True) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                for k, v in headers.items():
                    self.send_header(k, v)
                if length:
                    self.send_header("Content-Length", str(len(payload)))
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()

            def _answer(self, prompt: str) -> None:
                if prompt == "drip-body":  # valid headers, then one byte every 0.1 s
                    payload = _completion("x" * 100)
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    for i in range(len(payload)):
                        self.wfile.write(payload[i : i + 1])
                        self.wfile.flush()
                        time.sleep(0.1)
                elif prompt == "drip-headers":  # the status line, then headers one byte every 0.1 s
                    self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                    for _ in range(200):
                        self.wfile.write(b"X")
                        self.wfile.flush()
                        time.sleep(0.1)
                elif prompt == "big":  # a declared length over the cap
                    self._send(_completion("y" * 300_000), {})
                elif prompt == "big-unannounced":  # no length: found out while reading
                    self._send(_completion("y" * 300_000), {}, length=False)
                elif prompt == "bomb":  # 20 MB of zeros in about 20 KB of gzip
                    self._send(server.bomb, {"Content-Encoding": "gzip"})
                elif prompt == "gzip-ok":
                    self._send(gzip.compress(_completion("small and zipped")), {"Content-Encoding": "gzip"})
                elif prompt == "brotli":
                    self._send(b"\x00\x01", {"Content-Encoding": "br"})
                elif prompt == "down-then-hang":  # a 500 first, then nothing for longer than any deadline
                    if server.calls[prompt] > 1:
                        time.sleep(3)
                        return
                    self.send_response(500)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                elif prompt == "down":
                    self.send_response(500)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                else:
                    self._send(_completion("ok"), {})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )


@pytest.fixture
def hostile(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hostile]:
    monkeypatch.setenv(KEY_ENV, "sk-limits-0123456789")
    h = Hostile()
    h.thread.start()
    yield h
    h.httpd.shutdown()
    h.httpd.server_close()


def _ask(backend: OpenAIBackend, prompt: str) -> tuple[Any, float]:
    t0 = time.monotonic()
    [c] = backend.generate([[{"role": "user", "content": prompt}]], SamplingParams())
    return c, time.monotonic() - t0


@pytest.mark.parametrize("prompt", ["drip-body", "drip-headers"])
def test_drip_feed_is_cut_at_the_deadline(hostile: Hostile, prompt: str) -> None:
    b = OpenAIBackend(
        "m", base_url=hostile.url, api_key_env=KEY_ENV, timeout=3.0, deadline=1.0, max_retries=3, backoff=0.01
    )
    c, seconds = _ask(b, prompt)
    assert c.text == "" and c.error is not None and "deadline of 1 s" in c.error
    assert seconds < 1.6  # the per-read timeout (3 s) alone would never end it


def test_deadline_covers_retries_and_their_waits(hostile: Hostile) -> None:
    b = OpenAIBackend(
        "m",
        base_url=hostile.url,
        api_key_env=KEY_ENV,
        deadline=1.0,
        max_retries=50,
        backoff=0.3,
        backoff_max=0.3,
    )
    c, seconds = _ask(b, "down")
    assert c.error is not None and "deadline" in c.error and "500" in c.error
    assert seconds < 1.5 and 1 < hostile.calls["down"] < 10


def test_a_deadline_that_cuts_an_attempt_off_keeps_the_failure_before_it(hostile: Hostile) -> None:
    b = OpenAIBackend(
        "m", base_url=hostile.url, api_key_env=KEY_ENV, deadline=1.0, max_retries=50, backoff=0.01
    )
    c, seconds = _ask(b, "down-then-hang")
    assert c.error is not None and c.error.startswith("deadline of 1 s passed (timeout; the attempt before: ")
    assert "HTTP 500" in c.error and c.error.endswith("(after 2 attempts)")
    assert seconds < 1.5 and hostile.calls["down-then-hang"] == 2


@pytest.mark.parametrize("prompt", ["big", "big-unannounced", "bomb"])
def test_oversized_bodies_are_refused_not_retried(hostile: Hostile, prompt: str) -> None:
    import tracemalloc

    b = OpenAIBackend(
        "m", base_url=hostile.url, api_key_env=KEY_ENV, max_response_bytes=64 * 1024, backoff=0.01
    )
    tracemalloc.start()
    try:
        c, seconds = _ask(b, prompt)
        peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert c.text == "" and c.error is not None and "larger than 65,536 bytes" in c.error
    assert ("gzip-decoded" in c.error) == (prompt == "bomb")
    assert hostile.calls[prompt] == 1 and seconds < 5
    assert peak_mb < 5  # the 20 MB the bomb decodes to (or the 300 kB bodies) were never held


def test_gzip_body_under_the_cap_is_decoded(hostile: Hostile) -> None:
    b = OpenAIBackend("m", base_url=hostile.url, api_key_env=KEY_ENV, max_response_bytes=64 * 1024)
    c, _ = _ask(b, "gzip-ok")
    assert c.text == "small and zipped" and c.error is None


def test_unknown_content_encoding_is_an_error(hostile: Hostile) -> None:
    b = OpenAIBackend("m", base_url=hostile.url, api_key_env=KEY_ENV, backoff=0.01)
    c, _ = _ask(b, "brotli")
    assert c.error is not None and "Content-Encoding 'br'" in c.error and hostile.calls["brotli"] == 1


def test_bad_limits_are_model_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-limits-0123456789")
    with pytest.raises(ModelError, match="deadline"):
        OpenAIBackend("m", base_url="http://127.0.0.1:1/v1", api_key_env=KEY_ENV, deadline=0)
    with pytest.raises(ModelError, match="max_response_bytes"):
        OpenAIBackend("m", base_url="http://127.0.0.1:1/v1", api_key_env=KEY_ENV, max_response_bytes=10)


def test_eval_cli_deadline_and_size_options(hostile: Hostile, tmp_path: Any) -> None:
    from envengineer.cli import main
    from envengineer.mapf.generator import generate_cell
    from envengineer.mapf.instance import save_instances

    insts = generate_cell(num_agents=2, size=3, count=2, wait_count=0, seed=1, split="custom", hole_ratio=0.0)
    save_instances(insts, tmp_path / "set.jsonl")
    common = [
        "eval",
        "--backend",
        "openai",
        "--model",
        "m",
        "--base-url",
        hostile.url,
        "--api-key-env",
        KEY_ENV,
    ]
    common += ["--set", str(tmp_path / "set.jsonl"), "--max-retries", "1", "--timeout", "3"]
    hostile.mode = "drip-body"
    t0 = time.monotonic()
    assert main([*common, "--deadline", "1", "--out", str(tmp_path / "a")]) == 1  # every request failed
    assert time.monotonic() - t0 < 8
    rows = [json.loads(x) for x in (tmp_path / "a" / "responses.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all("deadline of 1 s" in r["error"] for r in rows)
    hostile.mode = "big"
    assert main([*common, "--max-response-bytes", "65536", "--out", str(tmp_path / "b")]) == 1
    rows = [json.loads(x) for x in (tmp_path / "b" / "responses.jsonl").read_text().splitlines()]
    assert all("larger than 65,536 bytes" in r["error"] for r in rows)
