"""The admin API in-process: tokens and humans of the admin's own tenant, names and bounds."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_http_inproc import edge

from hub.server.admin import TOKEN_EXPIRES_LIMIT


async def test_create_list_and_revoke_tokens(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        r = await e.call("POST", "/api/admin/tokens", e.admin,
                         json={"role": "human", "name": "new.person@acme", "expires_in": 60})
        assert r.status_code == 201, r.text
        made = r.json()
        assert (made["tenant"], made["role"], made["name"]) == ("default", "human",
                                                                "new.person@acme")
        assert made["expires_at"] == e.clock.now() + 60
        # the new human is a model at once (the humans cache was dropped)
        humans = (await e.call("GET", "/api/admin/humans", e.admin)).json()["humans"]
        assert humans == ["me", "new.person@acme", "you"]
        r = await e.call("GET", "/v1/models/new.person@acme", e.agent)
        assert r.status_code == 200
        listed = (await e.call("GET", "/api/admin/tokens", e.admin)).json()["tokens"]
        assert "new.person@acme" in [t["name"] for t in listed]
        assert made["token"] not in str(listed)  # secrets are never listed
        assert (await e.call("GET", "/api/me", made["token"])).status_code == 200
        e.clock.advance(61)
        assert (await e.call("GET", "/api/me", made["token"])).status_code == 401

        forever = (await e.call("POST", "/api/admin/tokens", e.admin,
                                json={"role": "agent", "name": "ci"})).json()
        assert forever["expires_at"] is None
        by_hash = hashlib.sha256(forever["token"].encode()).hexdigest()
        r = await e.call("POST", "/api/admin/tokens/revoke", e.admin, json={"token": by_hash})
        assert r.status_code == 204, r.text
        assert (await e.call("GET", "/api/me", forever["token"])).status_code == 401
        r = await e.call("POST", "/api/admin/tokens/revoke", e.admin, json={"token": by_hash})
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_an_admin_reaches_only_its_own_tenant(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        r = await e.call("POST", "/api/admin/tokens/revoke", e.admin,
                         json={"token": e.other_agent})
        assert r.status_code == 404
        assert (await e.call("GET", "/api/me", e.other_agent)).status_code == 200
        humans = (await e.call("GET", "/api/admin/humans", e.admin)).json()["humans"]
        assert "them" not in humans


@pytest.mark.parametrize("body, param", [
    ({"role": "robot", "name": "x"}, "role"),
    ({"role": "agent"}, "name"),
    ({"role": "agent", "name": ""}, "name"),
    ({"role": "agent", "name": "has space"}, "name"),
    ({"role": "agent", "name": "line\nbreak"}, "name"),
    ({"role": "agent", "name": "x" * 201}, "name"),
    ({"role": "agent", "name": 7}, "name"),
    ({"role": "agent", "name": "x", "expires_in": 0}, "expires_in"),
    ({"role": "agent", "name": "x", "expires_in": -5}, "expires_in"),
    ({"role": "agent", "name": "x", "expires_in": True}, "expires_in"),
    ({"role": "agent", "name": "x", "expires_in": "1d"}, "expires_in"),
    ({"role": "agent", "name": "x", "expires_in": 1e308}, "expires_in"),
    ({"role": "agent", "name": "x", "expires_in": TOKEN_EXPIRES_LIMIT + 1}, "expires_in"),
])
async def test_create_token_refuses_bad_fields_naming_them(tmp_path: Path, body: dict[str, Any],
                                                           param: str) -> None:
    async with edge(tmp_path) as e:
        r = await e.call("POST", "/api/admin/tokens", e.admin, json=body)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert (err["code"], err["param"]) == ("invalid", param)
        assert param in err["message"]


async def test_the_longest_token_expiry_is_accepted(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        r = await e.call("POST", "/api/admin/tokens", e.admin,
                         json={"role": "agent", "name": "long", "expires_in": TOKEN_EXPIRES_LIMIT})
        assert r.status_code == 201


async def test_admin_api_needs_an_admin_bearer_token(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        for method, path in (("GET", "/api/admin/tokens"), ("POST", "/api/admin/tokens"),
                             ("POST", "/api/admin/tokens/revoke"),
                             ("GET", "/api/admin/humans")):
            r = await e.call(method, path, json={})
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert r.json()["error"]["code"] == "unauthorized"
            for token in (e.agent, e.human):
                r = await e.call(method, path, token, json={})
                assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"


async def test_bad_admin_bodies(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        r = await e.call("POST", "/api/admin/tokens", e.admin, content=b"nope")
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_json"
        r = await e.call("POST", "/api/admin/tokens", e.admin, json=["agent"])
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid"
        r = await e.call("POST", "/api/admin/tokens", e.admin,
                         json={"role": "agent", "name": "x", "pad": "y" * 10_000})
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
        for token in (None, "", 5, "t" * 201):
            r = await e.call("POST", "/api/admin/tokens/revoke", e.admin, json={"token": token})
            assert r.status_code == 400 and r.json()["error"]["param"] == "token"


async def test_a_cookie_does_not_open_the_admin_api(tmp_path: Path) -> None:
    async with edge(tmp_path) as e, e.client() as browser:
        r = await browser.post("/api/session", json={"token": e.human},
                               headers={"origin": "http://hub.test"})
        assert r.status_code == 204
        assert isinstance(browser.cookies, httpx.Cookies) and browser.cookies.get("a2h_session")
        r = await browser.get("/api/admin/humans")
        assert r.status_code == 401
