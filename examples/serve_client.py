"""Play users of an ``rft`` serve run (``examples/serve.yaml``) for a bounded loop.

Each round, ``--episodes`` users each ask one max-digit question ("max 302132") of the
served model for ``--n`` answers (one GRPO group), score every answer against the known
digit, send the scores (``POST /feedback``) and release the episode to the buffer
(``POST /commit``); the round's mean reward is printed with the model versions that
answered. The serve process trains on the committed episodes and updates its weights
live, so later rounds are answered by newer versions (with ``--sync``, the default, each
round waits for the step the previous round's episodes fed: the run reproduces exactly).

Reward of an answer (``--reward``; checkable against the known digit)::

    exact     1 for the right digit, else 0 (the default; the quickstart's reward)
    distance  1 - |answer - digit| / 9 for a one-digit answer, else 0 (partial credit)

    .venv/bin/rft run examples/serve.yaml &          # prints the address; also in serve.json
    .venv/bin/python examples/serve_client.py --rounds 60 --stop-server

Standard library and ``openai`` only; ``--address`` or ``--job-dir`` (its ``serve.json``)
says where the endpoint is; ``--api-key`` (or ``$RFT_SERVE_API_KEY``) when it needs one.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai

HERE = Path(__file__).resolve().parent


def reward(answer: str, digit: str, kind: str = "exact") -> float:
    """``distance``: ``1 - |answer - digit| / 9`` for a one-digit answer, else 0;
    ``exact``: 1 for the right digit, else 0."""
    answer = answer.strip()
    if len(answer) != 1 or not answer.isdigit():
        return 0.0
    if kind == "exact":
        return float(answer == digit)
    return 1.0 - abs(int(answer) - int(digit)) / 9.0


def post(address: str, route: str, body: dict[str, Any], key: str | None) -> dict[str, Any]:
    """POST a JSON body; a 4xx/5xx is one line on stderr and an exception."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{address}{route}", data=json.dumps(body).encode(),
                                     method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        message = json.loads(exc.read())["error"]["message"]
        raise SystemExit(f"serve_client: {route} -> {exc.code}: {message}") from exc


def wait_for_address(job_dir: Path, timeout: float) -> tuple[str, int]:
    """``(address, pid)`` from the serve run's ``serve.json``, waiting for it to appear."""
    path = job_dir / "serve.json"
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"serve_client: {path} did not appear in {timeout:g} s "
                             "(is `rft run examples/serve.yaml` running?)")
        time.sleep(0.5)
    data = json.loads(path.read_text())
    return data["address"], int(data["pid"])


def model_version(address: str, timeout: float = 10.0) -> int:
    """The served model's version (``GET /health`` of a serve run)."""
    with urllib.request.urlopen(f"{address}/health", timeout=timeout) as response:
        return int(json.loads(response.read())["model_version"])


def wait_version(address: str, version: int, timeout: float) -> None:
    """Wait until the served model is at ``version`` or newer (its training step done)."""
    deadline = time.monotonic() + timeout
    while model_version(address) < version:
        if time.monotonic() > deadline:
            raise SystemExit(f"serve_client: model version {version} not served after "
                             f"{timeout:g} s (is the serve run training?)")
        time.sleep(0.05)


def play(args: argparse.Namespace) -> list[float]:
    """The bounded loop; returns the mean reward of each round."""
    pid = None
    if args.address:
        address = args.address.rstrip("/")
    else:
        address, pid = wait_for_address(Path(args.job_dir), args.wait)
    key = args.api_key or os.environ.get("RFT_SERVE_API_KEY")
    client = openai.OpenAI(base_url=f"{address}/v1", api_key=key or "EMPTY", max_retries=2)
    model = client.models.list().data[0].id
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line]
    means: list[float] = []
    start_version = model_version(address)
    for round_index in range(args.rounds):
        if args.sync and round_index:  # answered by the weights the last round trained
            wait_version(address, start_version + round_index, args.wait)
        rewards: list[float] = []
        exact = 0
        versions: set[int] = set()
        for user in range(args.episodes):
            row = rows[(round_index * args.episodes + user) % len(rows)]
            response = client.chat.completions.create(
                model=model, n=args.n, temperature=1.0,
                messages=[{"role": "user", "content": row["question"]}])
            scores = [reward(c.message.content or "", row["answer"], args.reward)
                      for c in response.choices]
            post(address, "/feedback", {"response_id": response.id, "rewards": scores}, key)
            post(address, "/commit", {"episode_id": response.model_extra["episode_id"]}, key)
            rewards += scores
            exact += sum(score == 1.0 for score in scores)
            versions.add(int(response.model_extra["model_version"]))
        means.append(statistics.fmean(rewards))
        print(f"round {round_index + 1:3d}: reward {means[-1]:.3f}  exact "
              f"{exact / len(rewards):.3f}  model versions "
              f"{min(versions)}-{max(versions)}", flush=True)
    if args.stop_server and pid is not None:
        os.kill(pid, signal.SIGTERM)  # the serve run saves its last step and exits
    return means


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="http://host:port of the serve run")
    parser.add_argument("--job-dir", default="checkpoints/serve/serve/serve",
                        help="the serve run's job dir (its serve.json), when no --address")
    parser.add_argument("--data", default=str(HERE / "data" / "max_digit" / "rl.jsonl"))
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--episodes", type=int, default=8, help="users per round")
    parser.add_argument("--n", type=int, default=8, help="answers per question (GRPO group)")
    parser.add_argument("--reward", choices=("exact", "distance"), default="exact",
                        help="how an answer is scored (module docstring)")
    parser.add_argument("--api-key", help="the endpoint's key (default $RFT_SERVE_API_KEY)")
    parser.add_argument("--wait", type=float, default=300.0,
                        help="seconds to wait for serve.json")
    parser.add_argument("--sync", action=argparse.BooleanOptionalAction, default=True,
                        help="before each round, wait for the training step of the last "
                             "one (--episodes must be the run's buffer.batch_size)")
    parser.add_argument("--stop-server", action="store_true",
                        help="send SIGTERM to the serve run (from serve.json) at the end")
    args = parser.parse_args(argv)
    means = play(args)
    third = max(1, len(means) // 3)
    print(f"mean reward: first {third} round(s) {statistics.fmean(means[:third]):.3f}, "
          f"last {third} round(s) {statistics.fmean(means[-third:]):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
