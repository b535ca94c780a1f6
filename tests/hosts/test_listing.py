"""The domains file: one domain a line; a bad line is named by its number."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.errors import ConfigError
from crawler.hosts import read_domains_file


def test_domains_are_read_in_order_once_each_without_comments(tmp_path: Path) -> None:
    path = tmp_path / "domains.txt"
    path.write_text(
        "\ufeff# shops\nshop.test\n\n  Bücher.test  # books\nshop.test\nnews.test.\n", encoding="utf-8"
    )
    assert read_domains_file(path) == {"shop.test": 2, "xn--bcher-kva.test": 4, "news.test": 6}


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("*.shop.test", "wildcards are not needed: write 'shop.test'"),
        (".shop.test", "a domain has no leading dot"),
        ("shop.*", "wildcard top-level domain"),
        ("10.0.0.1", "is an IP address"),
        ("shop.test news.test", "one domain a line"),
        ("https://shop.test/", "a domain, not a URL"),
        ("a" * 64 + ".test", "a label has at most 63"),
    ],
)
def test_a_bad_line_is_named_by_its_number(tmp_path: Path, line: str, why: str) -> None:
    path = tmp_path / "domains.txt"
    path.write_text(f"# list\nok.test\n\n{line}\nafter.test\n")
    with pytest.raises(ConfigError) as caught:
        read_domains_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:4: ")
    assert why in message
    assert "\n" not in message


def test_a_file_that_is_not_utf8_is_named_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "domains.txt"
    path.write_bytes(b"ok.test\nb\xfccher.test\n")
    with pytest.raises(ConfigError, match=r"domains\.txt:2: not UTF-8"):
        read_domains_file(path)


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the domains file"):
        read_domains_file(tmp_path / "absent.txt")


def test_fifty_thousand_domains_are_read(tmp_path: Path) -> None:
    path = tmp_path / "domains.txt"
    path.write_text("".join(f"shop{i}.test\n" for i in range(50_000)))
    assert len(read_domains_file(path)) == 50_000
