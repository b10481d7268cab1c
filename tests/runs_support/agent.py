"""The agent of write-up 001, with no progress-tracking code: read an issue, (optionally)
ask for approval, post a comment, send a notification.

    python agent.py --url HUB --token AGENT_TOKEN --api MOCK_URL --run RUN_ID

Prints one line per event on stdout, flushed, for the test to follow:
``STEP <name> <json>`` after each step, ``PAUSED`` when ``--pause-after`` matched (then it
waits to be killed), ``DONE <json>`` at the end, or ``ERROR <ExceptionClass> <message>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

import httpx

from client_sdk import A2HError, Hub, call_id

API = ""
_client: httpx.AsyncClient | None = None


def client() -> httpx.AsyncClient:
    global _client
    if _client is None:
        _client = httpx.AsyncClient(base_url=API, timeout=60)
    return _client


async def read_issue(number: int) -> dict:
    r = await client().get(f"/issues/{number}", headers={"Idempotency-Key": call_id()})
    return r.json()


async def fetch_issue(number: int) -> dict:  # the "new code" of the divergence test
    return await read_issue(number)


async def post_comment(number: int, body: str) -> dict:
    r = await client().post(f"/issues/{number}/comments", json={"body": body},
                            headers={"Idempotency-Key": call_id()})
    return r.json()


async def notify(comment_id: int) -> dict:
    # The notifier takes no idempotency key: marked unsafe_to_repeat below.
    r = await client().post("/notify", json={"comment_id": comment_id})
    return r.json()


def say(*parts: str) -> None:
    print(*parts, flush=True)


async def main() -> int:
    global API
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--api", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--version", default="1")
    p.add_argument("--approval", action="store_true")
    p.add_argument("--variant", action="store_true")
    p.add_argument("--pause-after", default=None)
    args = p.parse_args()
    API = args.api

    async def step(name: str, value: object) -> None:
        say("STEP", name, json.dumps(value))
        if args.pause_after == name:
            say("PAUSED")
            await asyncio.Event().wait()  # until SIGKILL

    try:
        async with Hub(args.url, token=args.token) as hub:
            async with hub.run(args.run, conversation="issue-42", version=args.version) as run:
                reader = fetch_issue if args.variant else read_issue
                issue = await run.call(reader, 42)
                await step("read_issue", issue)
                body = f"summary: {issue['title']}"
                if args.approval:
                    answer = await run.interrupt({"action": "post_comment", "body": body},
                                                 to="takeru")
                    await step("approval", answer.value)
                comment = await run.call(post_comment, 42, body)
                await step("post_comment", comment)
                sent = await run.call(notify, comment["id"], unsafe_to_repeat=True)
                await step("notify", sent)
            say("DONE", json.dumps({"comment": comment["id"]}))
            return 0
    except A2HError as exc:
        say("ERROR", type(exc).__name__, json.dumps({"message": exc.message,
                                                     "comment": getattr(exc, "comment", None),
                                                     "op_id": getattr(exc, "op_id", None)}))
        return 3
    finally:
        if _client is not None:
            await _client.aclose()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
