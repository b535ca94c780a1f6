"""A visit as the tests of one read it: the row the sink would make of it, and its answer's validators."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crawler.sink.sql import PageRecord
from crawler.sink.visits import row_of
from crawler.visited import Scheduled, Validators
from crawler.worker.page import Visit


@dataclass(frozen=True, slots=True)
class Observed:
    """A visit, read through its row (unscheduled); its other fields read as the visit's own."""

    visit: Visit

    @property
    def record(self) -> PageRecord:
        return row_of(self.visit.visited, Scheduled())

    @property
    def seen(self) -> Validators:
        return self.visit.visited.validators

    def __getattr__(self, name: str) -> Any:
        return getattr(self.visit, name)
