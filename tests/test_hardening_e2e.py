"""Issue 15 over a real ``a2h serve``: logs, slow headers, connections per address."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from pathlib import Path

import pytest
from e2e_util import UNIT, HubProcess, create_token, until
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from hub.logs import SafeLogFilter, escape, redact

pytestmark = pytest.mark.e2e


def test_escape_and_redact() -> None:
    assert escape("op\nforged 2026 INFO a2h hacked\x00\u2028") == \
        "op\\nforged 2026 INFO a2h hacked\\x00\\u2028"
    assert redact('"WebSocket /ws?token=a2h_ag_SECRETSECRET" 403') == \
        '"WebSocket /ws?<redacted>" 403'
    assert "SECRET" not in redact("Bearer a2h_hu_SECRETSECRETSECRET")
    record = logging.LogRecord("a2h", logging.INFO, __file__, 1, "op=%s room=%s",
                               ("a\nb", "c\r\nd"), None)
    assert SafeLogFilter().filter(record)
    assert record.getMessage() == "op=a\\nb room=c\\r\\nd"


async def test_log_lines_are_one_line_and_carry_no_token(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    agent = create_token(db, agent="bot")
    with HubProcess(db, "--log-level", "info") as hub:
        with pytest.raises(InvalidStatus):
            async with connect(hub.ws_url + f"?token={agent}"):
                pass
        # An HTTP path with an encoded newline lands in the log of a failed call.
        reader, writer = await asyncio.open_connection("127.0.0.1", int(hub.url.rsplit(":")[-1]))
        writer.write(b"GET /api/requests/x%0Aforged%20line HTTP/1.1\r\nhost: h\r\n"
                     b"authorization: Bearer " + agent.encode() + b"\r\n\r\n")
        await writer.drain()
        await reader.read(1000)
        writer.close()
        await until(lambda: any("WebSocket" in line for line in hub.output), 10,
                    "the refused socket was logged")
    text = "".join(hub.output)
    assert agent not in text and agent[8:] not in text
    assert not any(line.startswith("forged") for line in hub.output)


async def test_slow_headers_are_cut_and_one_address_is_bounded(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    create_token(db, agent="bot")
    with HubProcess(db, "--header-timeout", str(1.0 * UNIT), "--max-conns-per-ip", "20") as hub:
        port = int(hub.url.rsplit(":")[-1])
        slow = []
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")  # never finished
            slow.append(s)
        # The 21st connection from this address is refused at once.
        extra = socket.create_connection(("127.0.0.1", port))
        extra.settimeout(5 * UNIT)
        assert b"503" in extra.recv(200)
        extra.close()
        # The slow ones are closed by the header timeout: each read ends with EOF.
        start = time.monotonic()
        for s in slow:
            s.settimeout(10 * UNIT)
            assert s.recv(100) == b""
            s.close()
        assert time.monotonic() - start < 8 * UNIT
        # Then the address may connect again: the counts were released.
        async def healthy() -> bool:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            data = await reader.read(1000)
            writer.close()
            return b"200 OK" in data
        assert await until(healthy, 10)
