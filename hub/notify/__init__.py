"""Reaching people who are not looking: signed webhooks, ntfy topics and Web Push.

One delivery mechanism, several channels (docs/notifications.md)::

    room commits Insert/Resolve ──► the store writes, in the same transaction, one delivery
    run_step → needs_attention      row per matching endpoint (the outbox; events.py)
                                               │
                                               ▼ after commit
    HubService owns the Notifier (worker.py): claims due rows, sends them with bounded
    concurrency and timeouts, settles each (done / retry with backoff / failed / skipped),
    disables an endpoint that failed for a day.
                                               │
               ┌───────────────────────────────┼──────────────────────────┐
               ▼                               ▼                          ▼
    webhooks.py (Standard Webhooks)     ntfy.py (topic POST)      webpush.py (RFC 8291 +
                                                                  VAPID, via pywebpush)

``events`` is pure (the store imports it); the rest does I/O and is imported only by the
service and the CLI.
"""
