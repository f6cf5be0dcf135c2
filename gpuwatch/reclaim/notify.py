"""Team notifications: a Slack-compatible incoming-webhook POST (``{"text": ...}``) per team.

A failed webhook is logged and never blocks a decision: the annotation and the Event are the
record; the webhook is a courtesy.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)
Post = Callable[[str, dict], None]


def post_json(url: str, payload: dict, *, timeout_seconds: float = 5.0) -> None:
    """POST ``payload`` as JSON; raises on a non-2xx answer or a network error."""
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_seconds) as response:
        response.read()


def webhook_notifier(webhooks: Mapping[str, str], *, post: Post = post_json) -> Callable[[str, str], None]:
    """``notify(team, text)`` posting to the team's webhook, else the ``"*"`` one, else nothing."""

    def notify(team: str, text: str) -> None:
        url = webhooks.get(team) or webhooks.get("*")
        if not url:
            return
        try:
            post(url, {"text": text})
        except Exception as exc:  # a courtesy: any failure is logged, never raised
            log.warning("webhook for team %s failed: %s", team or "(none)", exc)

    return notify
