"""The delivery worker: sends what the outbox holds, after commit, never on a request's path.

Theory of operation
-------------------
The store writes delivery rows in the transaction that commits their event (see
``hub.store.notify_sql``). The :class:`Notifier` — owned, started and stopped by
``HubService`` — wakes when a room released an effect (``kick``), every ``notify_poll``
seconds, and when one of its sends finishes. It claims due rows with a lease (another node,
or this one, will not claim them meanwhile), groups them (one task per webhook or ntfy
delivery; one per push subscription, so several requests can become one summary), and
runs each group as a task under a semaphore of ``notify_concurrency`` sends with a total
timeout of ``notify_timeout`` each. A slow or dead endpoint therefore holds at most its
own sends, never a room, a socket or a commit.

Each attempt ends in one outcome, recorded on the row and its endpoint::

    delivered (2xx)                          → done
    failed (status, timeout, refused)        → retry at now + backoff(attempts):
                                               notify_backoff · 2^attempts, ≤ notify_backoff_max
    endpoint failing for notify_disable_after → endpoint disabled (reason kept), its rows failed
    row older than notify_disable_after       → failed ("gave up")
    push: request already resolved            → skipped (nothing pushed)
    push: 404/410 from the push service       → the subscription is deleted
    push: another push to this browser within push_coalesce s → postponed to the window's
          end, then everything due goes out as one summary notification

Rows are at least once: a crash between a send and its settle sends again after the
restart (``release_deliveries`` at start ends this node's leases), under the same
``webhook-id``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from hub.clock import Clock, Timer
from hub.config import Settings
from hub.faults import crash_point
from hub.notify import ntfy, webhooks
from hub.notify.events import Channel, DeliveryOutcome, iso
from hub.notify.http import MISSING, AiohttpTransport, Response, Transport
from hub.store import Delivery, Endpoint, Store

if TYPE_CHECKING:  # cryptography and pywebpush come with the notify extra: imported lazily
    from hub.notify.webpush import VapidKey

log = logging.getLogger("a2h.notify")

#: A push payload must fit in 4 KiB once encrypted; beyond this many bytes of JSON the
#: notification drops its answer actions (the inbox still answers).
PUSH_PAYLOAD_LIMIT = 3500


def backoff(attempts: int, base: float, cap: float) -> float:
    """Seconds before the next try, after ``attempts`` tries already failed before this one."""
    return float(min(cap, base * 2 ** min(attempts, 30)))


class Notifier:
    """Sends the outbox's deliveries. Owned by ``HubService`` (start, kick, stop)."""

    def __init__(self, store: Store, clock: Clock, settings: Settings, *,
                 transport: Transport | None = None, distributed: bool = False) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.transport: Transport = transport or AiohttpTransport()
        self.distributed = distributed
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._inflight: set[tuple[str, str]] = set()
        self._sem = asyncio.Semaphore(max(1, settings.notify_concurrency))
        # push subscription id -> when the last notification went to it (coalescing)
        self._last_push: dict[str, float] = {}
        self._vapid: VapidKey | None = None
        #: When the last look at the outbox read the clock: the next look is due a poll after it.
        self._looked = 0.0
        self.sent = 0
        self.failed = 0
        self.skipped = 0

    # -- lifecycle

    async def start(self) -> None:
        if not self.distributed:
            # Alone on this store: leases left by a crashed run are ours to take back now.
            await self.store.release_deliveries()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="a2h notify")

    def kick(self) -> None:
        """Something was committed that may have written deliveries: look soon."""
        self._wake.set()

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._sending) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._task = None
        await self.transport.aclose()

    async def vapid(self) -> VapidKey:
        """The hub's VAPID key: made on the first call ever, then read from the store.

        Raises:
            ImportError: the notify extra (cryptography, pywebpush) is not installed.
        """
        from hub.notify import webpush

        if self._vapid is None:
            pem = await self.store.setting(webpush.VAPID_SETTING, webpush.new_private_pem())
            self._vapid = webpush.VapidKey(pem)
        return self._vapid

    def statistics(self) -> dict[str, int]:
        return {"sending": len(self._sending), "sent": self.sent, "failed": self.failed,
                "skipped": self.skipped}

    # -- the loop

    async def _run(self) -> None:
        while True:
            try:
                more = await self._pump()
            except Exception as exc:  # the store failed: look again at the next wake-up
                log.warning("notification outbox: %s", exc)
                more = False
            if not more:
                await self._idle()
            if self.settings.notify_min_interval > 0:
                # Under a flood of commits, kicks come back to back: look at most this often.
                await self.clock.sleep(self.settings.notify_min_interval)

    async def _idle(self) -> None:
        timer: Timer | None = None
        due = self._looked + self.settings.notify_poll
        if due <= self.clock.now():
            # The clock passed the next look while this one waited on the store: look now.
            self._wake.clear()
            return
        if not self._wake.is_set():
            timer = self.clock.call_at(due, self._wake.set)
        try:
            await self._wake.wait()
        finally:
            if timer is not None:
                timer.cancel()
            self._wake.clear()

    async def _pump(self) -> bool:
        """Claim due deliveries and start sending them; True if it should look again now."""
        now = self._looked = self.clock.now()
        room = 4 * max(1, self.settings.notify_concurrency) - len(self._sending)
        if room <= 0:
            return False
        lease = max(60.0, 3 * self.settings.notify_timeout)
        claimed = await self.store.claim_deliveries(now, lease, room)
        groups: dict[str, list[Delivery]] = {}
        for d in claimed:
            key = (d.msg_id, d.endpoint.id)
            if key in self._inflight:  # still being sent here; its lease ran out meanwhile
                continue
            self._inflight.add(key)
            group = d.endpoint.id if d.endpoint.channel is Channel.PUSH else f"{key}"
            groups.setdefault(group, []).append(d)
        loop = asyncio.get_running_loop()
        for group_rows in groups.values():
            task = loop.create_task(self._send_group(group_rows), name="a2h notify send")
            self._sending.add(task)
            task.add_done_callback(self._sent)
        return len(claimed) >= room

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("notification send failed", exc_info=task.exception())
        self.kick()

    async def _send_group(self, rows: list[Delivery]) -> None:
        try:
            async with self._sem:
                crash_point("notify.before_send")
                endpoint = rows[0].endpoint
                try:
                    if endpoint.channel is Channel.PUSH:
                        await self._push(endpoint, rows)
                    else:
                        await self._post_one(rows[0])
                except ImportError:  # Web Push without the notify extra: say so, retry later
                    await self._settle(rows, Response(None, MISSING))
        finally:
            for d in rows:
                self._inflight.discard((d.msg_id, d.endpoint.id))

    # -- webhooks and ntfy

    async def _post_one(self, d: Delivery) -> None:
        ep = d.endpoint
        s = self.settings
        if ep.channel is Channel.WEBHOOK:
            headers = webhooks.headers(ep.secret or "", d.msg_id, int(self.clock.now()), d.body)
            body = d.body
        else:
            headers, body = ntfy.message(d.body, self.base_url, ep.secret)
        resp = await self.transport.post(ep.url, headers, body, s.notify_timeout)
        await self._settle([d], resp)

    @property
    def base_url(self) -> str:
        s = self.settings
        return s.public_url or f"http://{s.host}:{s.port}"

    async def _settle(self, rows: Sequence[Delivery], resp: Response) -> None:
        now = self.clock.now()
        s = self.settings
        if resp.ok:
            for d in rows:
                await self.store.settle_delivery(d, now, DeliveryOutcome.DONE)
            self.sent += len(rows)
            return
        error = resp.describe()
        self.failed += len(rows)
        ep = rows[0].endpoint
        if ep.failing_since is not None and now - ep.failing_since >= s.notify_disable_after:
            reason = (f"disabled at {iso(now)}: every delivery failed since "
                      f"{iso(ep.failing_since)}; last error: {error}")
            log.warning("notify endpoint %s (%s) %s", ep.id, ep.url, reason)
            for d in rows:  # count this attempt, then fail the rest with the endpoint
                await self.store.settle_delivery(d, now, DeliveryOutcome.RETRY, error, now)
            await self.store.disable_endpoint(ep.id, now, reason)
            return
        for d in rows:
            if now - d.created_at >= s.notify_disable_after:
                await self.store.settle_delivery(
                    d, now, DeliveryOutcome.FAILED,
                    f"gave up after {d.attempts + 1} attempts: {error}")
                continue
            retry_at = now + backoff(d.attempts, s.notify_backoff, s.notify_backoff_max)
            await self.store.settle_delivery(d, now, DeliveryOutcome.RETRY, error, retry_at)

    # -- web push

    async def _push(self, ep: Endpoint, rows: list[Delivery]) -> None:
        from hub.notify import webpush

        live: list[Delivery] = []
        views: list[dict[str, Any]] = []
        for d in rows:
            req = await self.store.get_request(ep.tenant, d.op_id) if d.op_id else None
            if req is None or req.terminal:  # answered meanwhile: nothing to tell
                await self.store.settle_delivery(d, self.clock.now(), DeliveryOutcome.SKIPPED,
                                                 "resolved before it was pushed")
                self.skipped += 1
                continue
            live.append(d)
            views.append(req.view())
        if not live:
            return
        now = self.clock.now()
        last = self._last_push.get(ep.id)
        window = self.settings.push_coalesce
        if last is not None and now - last < window:
            for d in live:  # one summary at the end of the window
                await self.store.settle_delivery(d, now, DeliveryOutcome.POSTPONED,
                                                 next_at=last + window)
            return
        message = webpush.single(views[0]) if len(views) == 1 else webpush.summary(views)
        payload = orjson.dumps(message)
        if len(payload) > PUSH_PAYLOAD_LIMIT:
            payload = orjson.dumps({**message, "actions": [], "body": message["body"][:200]})
        vapid = await self.vapid()
        try:
            keys = orjson.loads(ep.secret or "{}")
            body = await asyncio.get_running_loop().run_in_executor(
                None, webpush.encrypt, ep.url, keys, payload)
        except Exception as exc:  # keys the browser sent us are unusable: drop it
            log.warning("push subscription %s has unusable keys (%s): removed", ep.id, exc)
            await self.store.remove_endpoint(ep.id)
            return
        headers = webpush.request_headers(vapid, ep.url, self.settings.vapid_subject, now)
        resp = await self.transport.post(ep.url, headers, body, self.settings.notify_timeout)
        if resp.status in (404, 410):  # the browser unsubscribed, or the push service forgot it
            log.info("push subscription %s is gone (%s): removed", ep.id, resp.describe())
            await self.store.remove_endpoint(ep.id)
            self._last_push.pop(ep.id, None)
            return
        if resp.ok:
            self._last_push[ep.id] = now
            self._forget_old_pushes(now)
        await self._settle(live, resp)

    def _forget_old_pushes(self, now: float) -> None:
        if len(self._last_push) > 1000:
            horizon = now - self.settings.push_coalesce
            for key in [k for k, t in self._last_push.items() if t < horizon]:
                del self._last_push[key]
