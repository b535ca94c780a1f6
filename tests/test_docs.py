"""The documentation stays true: every flag of every program is in docs/commands.md and in the README's
command table, the README's first domains.yaml loads, and every relative link in the Markdown files leads
to a file and, with an anchor, to one of its headings.

Each program's parser is built by its own build function, which connects nowhere.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crawler import cli
from crawler.api import main as api
from crawler.config import load_config
from crawler.gateway import cli as gateway
from crawler.scheduler import cli as scheduler

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
COMMANDS = ROOT / "docs" / "commands.md"
MARKDOWN = [README, ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "crawler": cli.build_parser,
    "crawler-consume": cli.build_consume_parser,
    "crawler-api": api.build_parser,
    "crawler-gateway": gateway.build_parser,
    "crawler-scheduler": scheduler.build_parser,
}


def parser_of(program: str) -> argparse.ArgumentParser:
    """The argument parser of `program` (built without connecting anywhere)."""
    return PARSERS[program]()


def commands(name: str, parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(`crawler seed`, its parser), ...: the program itself and each subcommand, depth first."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from commands(f"{name} {sub}", subparser)


def flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string a person may type (`-h`/`--help` and hidden options aside)."""
    return {
        option
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS
        for option in action.option_strings
    }


def actions(parser: argparse.ArgumentParser) -> set[str]:
    """The values of positional arguments that take a fixed set (`list`, `show`, ...)."""
    return {
        str(choice)
        for action in parser._actions
        if not action.option_strings
        and action.choices is not None
        and not isinstance(action, argparse._SubParsersAction)
        for choice in action.choices
    }


ALL = [(name, sub) for program in PARSERS for name, sub in commands(program, parser_of(program))]


def documented(text: str, word: str) -> bool:
    """`word` written as code: `--max-depth`, `--max-depth N`, `list|show`, ..."""
    return re.search(rf"`(?:[^`\n]*[\s|\[,/])?{re.escape(word)}(?![\w-])", text) is not None


def without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def sections(text: str) -> dict[str, str]:
    """Heading text -> the text under it up to the next heading of level 2 or 3."""
    parts = re.split(r"^#{2,3} (.+)$", without_code_blocks(text), flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


@pytest.mark.parametrize(("name", "parser"), ALL, ids=[name for name, _ in ALL])
def test_every_flag_is_in_the_command_reference(name: str, parser: argparse.ArgumentParser) -> None:
    reference = sections(COMMANDS.read_text())
    assert f"`{name}`" in reference, f"docs/commands.md has no section `{name}`"
    section = reference[f"`{name}`"]
    if "(#common-options)" in section:
        section += reference["Common options"]
    missing = sorted(w for w in flags(parser) | actions(parser) if not documented(section, w))
    assert not missing, f"docs/commands.md, section `{name}`, lacks {', '.join(missing)}"


def test_the_readme_command_table_has_every_command_and_flag() -> None:
    table = sections(README.read_text())["Commands"]
    for name, parser in ALL:
        assert name in table, name
        missing = sorted(w for w in flags(parser) | actions(parser) if not documented(table, w))
        assert not missing, f"the README's command table lacks {name} {', '.join(missing)}"


def test_every_program_is_in_the_reference() -> None:
    # A program added to pyproject.toml's scripts has its parser checked here too.
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert {name.split()[0] for name, _ in ALL} == set(PARSERS) == set(scripts)


def test_the_readme_is_a_first_hour_with_two_set_up_commands() -> None:
    # Depth belongs in docs/: the README stays short, and opens with exactly the demo and the tests.
    text = README.read_text()
    assert len(text.splitlines()) <= 300, "README.md is over 300 lines: move depth to docs/"
    first = re.search(r"```sh\n(.*?)```", text, re.S)
    assert first and [line.split("#")[0].strip() for line in first.group(1).splitlines()] == [
        "bash scripts/demo",
        "bash scripts/test",
    ]


def test_the_readmes_own_site_configuration_loads(tmp_path: Path) -> None:
    text = README.read_text()
    block = re.search(r"```yaml\n(# config/mysite.yaml\n.*?)```", text, re.S)
    assert block, "the README's config/mysite.yaml"
    path = tmp_path / "mysite.yaml"
    path.write_text(block.group(1))
    config = load_config(str(path))
    assert not config.resolve and not config.allow_private_networks  # what a real site does without
    for seed in re.findall(r"crawler (?:crawl|seed) (https://\S+)", text):
        assert config.domain_of(seed.split("/")[2]) in config.domains, seed


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", without_code_blocks(path.read_text()), re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> Iterator[str]:
    text = re.sub(r"`[^`\n]*`", "", without_code_blocks(path.read_text()))
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"[a-z]+:", target):
            yield target


@pytest.mark.parametrize("path", MARKDOWN, ids=[str(p.relative_to(ROOT)) for p in MARKDOWN])
def test_every_relative_link_leads_somewhere(path: Path) -> None:
    broken = []
    for target in links(path):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


def test_security_md_has_the_threat_model_and_says_what_is_code_and_how_chromium_runs() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "security.md").read_text()
    threat = text.split("## Threat model", 1)[1].split("\n## ", 1)[0]
    for holder in (
        "a worker",
        "`admin` token",
        "`read` token",
        "a gateway key",
        "metrics_token_env",
        "an exit",
    ):
        assert holder in threat, holder
    assert "What crawler-gateway promises between keys" in threat
    assert "**code-equivalent**" in text and "`parse:`" in text
    assert "`--no-sandbox`" in text and "`render: {sandbox: true}`" in text
    assert "CONNECT ADDRESS:PORT" in text and "nft add rule" in text  # pinning, and the egress rule
