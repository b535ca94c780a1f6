"""Property-based tests generated from the schema the API serves: no 5xx, no response off the schema."""

from __future__ import annotations

from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from demo.site import serve
from tests.support import api as api_support
from tests.support.api import ADMIN
from tests.support.services import settings_for
from tests.support.sites import shops, write_config

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = 12  # per operation: ~15 operations on two shared cores


def test_the_api_keeps_to_its_schema(amqp_url: str, prefix: str, sqlite_url: str, tmp_path: Path) -> None:
    sites = shops(products=2, hosts=["a.test"])
    crawl_settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    with serve(*sites), api_support.running(crawl_settings) as api:
        schema = schemathesis.openapi.from_url(f"{api.base}/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 14
        strategy = st.one_of(*(op.as_strategy() for op in operations))

        @given(case=strategy)
        @settings(
            max_examples=EXAMPLES * len(operations),
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate(headers={"Authorization": f"Bearer {ADMIN}"}, checks=CHECKS)

        check()
        with api.client() as client:
            metrics = client.get("/v1/metrics").text
        served = sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("crawler_api_requests_total")
        )
        assert served >= EXAMPLES * len(operations) / 2, "schemathesis reached the API"
