"""No secret of the process reaches disk or a log, even when the endpoint echoes it into its answers."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")
pytest.importorskip("envengineer.mapf.prompt")

from small_sets import write_small_sets

KEY = "sk-echo-SECRET-0123456789abcdef"
KEY_ENV = "ENVENGINEER_ECHO_API_KEY"
TOKEN = "hf_echoTOKEN9876543210zyxw"
TOKEN_ENV = "ENVENGINEER_ECHO_TOKEN"


class Echo:
    """An endpoint that puts the request's key (and a token it was told) into everything it returns.

    The answer is an engineer-style JSON whose rationale holds both secrets (so they reach the rationale,
    the decision and the responses); every third request instead fails with a 400 whose body echoes them.
    """

    def __init__(self) -> None:
        self.count = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                server.count += 1
                echoed = f"your key is {key} and the token {TOKEN}"
                if server.count % 3 == 0:
                    payload = json.dumps({"error": {"message": echoed, "type": "invalid_request_error"}})
                    status = 400
                else:
                    answer = {
                        "rationale": echoed,
                        "sizes": {"3": {"data_ratio": 1, "hole_ratio": 0.1, "wait_ratio": 0.5}},
                    }
                    text = json.dumps(answer) + f"\n<answer>\nA0: {key}\n</answer>"
                    payload = json.dumps(
                        {
                            "id": key,
                            "object": "chat.completion",
                            "created": 0,
                            "model": "m",
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop",
                                }
                            ],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 5, "total_tokens": 6},
                        }
                    )
                    status = 200
                body = payload.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def echo(monkeypatch: pytest.MonkeyPatch) -> Iterator[Echo]:
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    server = Echo()
    thread = threading.Thread(target=server.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def _assert_clean(root: Path, *texts: str) -> int:
    """No file under ``root`` and none of ``texts`` holds a secret; returns the number of files checked."""
    files = [p for p in root.rglob("*") if p.is_file()]
    for p in files:
        data = p.read_bytes()
        for secret in (KEY, TOKEN):
            assert secret.encode() not in data, f"{secret} leaked into {p}"
    for text in texts:
        assert KEY not in text and TOKEN not in text
    return len(files)


def test_eval_cli_with_an_echoing_endpoint(echo: Echo, tmp_path: Path) -> None:
    sets = write_small_sets(tmp_path, 5)
    out = tmp_path / "eval"
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "envengineer.cli", "-v", "eval", "--backend", "openai", "--model", "m"]
    cmd += ["--base-url", echo.url, "--api-key-env", KEY_ENV, "--set", str(sets["validation"])]
    cmd += ["--out", str(out), "--max-retries", "0", "--concurrency", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(x) for x in (out / "responses.jsonl").read_text().splitlines()]
    assert echo.count == len(rows) >= 3
    assert any("***" in r["response"] for r in rows) and any("***" in (r["error"] or "") for r in rows)
    assert _assert_clean(out, proc.stdout, proc.stderr) >= 3


def test_loop_with_an_echoing_openai_engineer(
    echo: Echo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from envengineer.loop.experiment import Experiment
    from envengineer.loop.runner import run_experiment

    sets = write_small_sets(tmp_path, 7)
    exp = Experiment.model_validate(
        {
            "name": "t-echo",
            "policy": "scripted:greedy",
            "rounds": 2,
            "samples_per_round": 4,
            "validation": {"per_cell": 1, "agents": [3], "max_size": 4},
            "evaluation": {"batch_size": 4, "benchmark_path": str(sets["benchmark"])},
            "engineer": {
                "kind": "openai",
                "base_url": echo.url,
                "model": "m",
                "api_key_env": KEY_ENV,
                "retries": 2,
                "request_deadline": 30,
            },
        }
    )
    caplog.set_level(logging.DEBUG)
    run = tmp_path / "run"
    run_experiment(exp, run)
    assert echo.count >= 1
    rationale = (run / "round_01" / "engineer" / "rationale.txt").read_text()
    assert "your key is *** and the token ***" in rationale
    assert _assert_clean(run, caplog.text) > 10
