"""A field's text as the value its `type` says: numbers, locale-tolerant prices, ISO dates, booleans.

Every converter returns None for text it cannot read: a value that is not a number is no number.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime
from email.utils import parsedate_to_datetime
from typing import Any

# Digits with the group separators of any locale: space, no-break spaces, ' and \u2019 (Swiss), . and ,.
_NUMBER = re.compile(r"[-+\u2212]?\d[\d\s\u00a0\u202f'\u2019.,]*")
_SPACES = re.compile(r"[\s\u00a0\u202f'\u2019]")
_TRUE = frozenset({"true", "yes", "y", "1", "on", "in stock", "instock", "available"})
_FALSE = frozenset({"false", "no", "n", "0", "off", "out of stock", "outofstock", "unavailable", "soldout"})
# Day-first and month-name spellings seen on shop and news pages; ambiguous all-numeric dates are
# read day first (as most of the world writes them) unless a field gives its own `format`.
_DATE_FORMATS = (
    "%Y-%m-%d",
    "%Y/%m/%d",
    "%d.%m.%Y",
    "%d/%m/%Y",
    "%d-%m-%Y",
    "%d %B %Y",
    "%d %b %Y",
    "%d. %B %Y",
    "%B %d, %Y",
    "%b %d, %Y",
    "%B %d %Y",
    "%b %d %Y",
    "%d %B, %Y",
    "%A, %d %B %Y",
    "%A, %B %d, %Y",
    "%a, %d %b %Y",
)


def to_int(text: str) -> int | None:
    """The first integer in `text` ("1,299 reviews" -> 1299); None if there is none."""
    number = to_price(text)
    return None if number is None else int(number)


def to_float(text: str) -> float | None:
    """The first number in `text`, with either decimal separator."""
    return to_price(text)


def to_price(text: str) -> float | None:
    """An amount however the page's locale spells it: 1.299,00 €, $1,299.00, 1 299 kr, CHF 1'299.50."""
    found = _NUMBER.search(text)
    if found is None:
        return None
    raw = _SPACES.sub("", found[0]).rstrip(".,").replace("\u2212", "-")
    dots, commas = raw.count("."), raw.count(",")
    if dots and commas:
        # The separator that comes last is the decimal one.
        decimal = "." if raw.rfind(".") > raw.rfind(",") else ","
    elif dots + commas == 1:
        # One separator: decimal unless exactly three digits follow it (1,299 or 1.299 is thousands).
        sep = "." if dots else ","
        decimal = sep if len(raw) - raw.index(sep) - 1 != 3 else ""
    else:
        decimal = ""  # none, or repeated: thousands separators (1.299.000)
    thousands = {".", ","} - {decimal}
    for sep in thousands:
        raw = raw.replace(sep, "")
    if decimal:
        raw = raw.replace(decimal, ".")
    try:
        return float(raw)
    except ValueError:
        return None


def to_bool(text: str) -> bool | None:
    """yes/no, true/false, 1/0, on/off, in stock / out of stock (any case); None otherwise."""
    word = " ".join(text.lower().replace("_", " ").split())
    word = word.removeprefix("https://schema.org/").removeprefix("http://schema.org/")
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    return None


def to_date(text: str, fmt: str | None = None) -> str | None:
    """An ISO 8601 date (or date-time, if the text has a time) out of the common spellings."""
    text = " ".join(text.split())
    if fmt is not None:
        try:
            return _iso(datetime.strptime(text, fmt))
        except ValueError:
            return None
    try:
        return _iso(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        pass
    try:
        return _iso(parsedate_to_datetime(text))  # RFC 2822, as in feeds and HTTP headers
    except (TypeError, ValueError, IndexError):
        pass
    for candidate in (text, text.rstrip(".")):
        for form in _DATE_FORMATS:
            try:
                return _iso(datetime.strptime(candidate, form))
            except ValueError:
                continue
    return None


def _iso(moment: datetime) -> str:
    if moment.time() == datetime.min.time() and moment.tzinfo is None:
        return date(moment.year, moment.month, moment.day).isoformat()
    return moment.isoformat()


CONVERTERS: dict[str, Callable[[str], Any]] = {
    "int": to_int,
    "float": to_float,
    "price": to_price,
    "bool": to_bool,
    "date": to_date,
}
