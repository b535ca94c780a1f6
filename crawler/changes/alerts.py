"""Publishing a crawl's coverage alerts to the change feed's exchange under their own routing key
(COVERAGE_ALERT_KEY), persistent and confirmed, as the feed's versions are (docs/quality.md).

The body is JSON: `kind` (always `coverage_alert`: no version has it), `crawl`, `domain`, `alert`
(`below_expected`, `dropped`, `failing`, `too_few`), `pages` (`all` or a page rule), `subject` (a
field, an expectation's name, or `items`), `message`, and for a field, its `rate`, `before` and
`floor`. The AMQP `message_id` is the alert's id: the same for every copy of one alert.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from aio_pika.abc import AbstractExchange
from aiormq.exceptions import AMQPError, ChannelInvalidStateError

from crawler.errors import FeedError
from crawler.frontier.publisher import Outgoing, Publisher
from crawler.names import COVERAGE_ALERT_KEY
from crawler.quality.compare import Alert, DomainQuality
from crawler.quality.report import ALL_PAGES

ALERT_KIND = "coverage_alert"  # the body's `kind` and the message's AMQP type


def alert_id(crawl: str, alert: Alert) -> str:
    """What names one alert of one crawl, however often its coverage is read: `crawl domain pages
    subject kind`, the AMQP message_id of its message."""
    return " ".join((crawl, alert.domain, alert.page_rule or ALL_PAGES, alert.subject, alert.kind))


def alert_body(crawl: str, quality: DomainQuality, alert: Alert, raised: datetime) -> bytes:
    """The feed's JSON body of `alert`, raised at `raised` in `crawl`'s coverage of its domain."""
    out: dict[str, object] = {
        "kind": ALERT_KIND,
        "crawl": crawl,
        "domain": alert.domain,
        "alert": alert.kind,
        "pages": alert.page_rule or ALL_PAGES,
        "subject": alert.subject,
        "message": alert.message,
        "raised_at": raised.astimezone(UTC).isoformat().replace("+00:00", "Z"),
    }
    row = next(
        (r for r in quality.fields if (r.page_rule, r.field) == (alert.page_rule, alert.subject)), None
    )
    if row is not None:
        before = row.before.rate if row.before is not None else None
        out |= {"rate": _rounded(row.now.rate), "before": _rounded(before), "floor": _rounded(row.floor)}
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode()


def _rounded(rate: float | None) -> float | None:
    return None if rate is None else round(rate, 4)


class AlertFeed:
    """Publishes coverage alerts to the changes exchange, on a channel opened with confirms."""

    def __init__(self, exchange: AbstractExchange) -> None:
        self._publisher = Publisher(exchange)

    async def announce(self, crawl: str, raised: Sequence[tuple[DomainQuality, Alert]]) -> None:
        """Publish `crawl`'s `raised` alerts (each beside its domain's coverage) and wait for every
        confirm; FeedError naming the first one not confirmed."""
        now = datetime.now(UTC)
        outs = [
            Outgoing(COVERAGE_ALERT_KEY, alert_body(crawl, q, a, now), 0, alert_id(crawl, a), ALERT_KIND)
            for q, a in raised
        ]
        try:
            outcomes: Sequence[BaseException | None] = await self._publisher.publish(outs)
        except (AMQPError, ChannelInvalidStateError, ConnectionError) as exc:
            outcomes = [exc] * len(outs)
        for (_, alert), failed in zip(raised, outcomes, strict=True):
            if failed is not None:
                raise FeedError(
                    f"coverage alert {alert_id(crawl, alert)!r} not confirmed: {failed!r}"
                ) from failed
