"""Where a consumer's CPU goes: py-spy's collapsed stacks summarised by own time and by activity.

python -m bench.profile PROFILE.txt  (py-spy record --format raw output; `bench.run --profile` makes one)
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a sampled stack."""

    func: str
    file: str

    @property
    def where(self) -> str:
        """function (shortened file) for a person."""
        short = re.sub(r"^.*/(site-packages|python3\.\d+)/", "", self.file)
        return f"{self.func} ({short})"


Stack = tuple[Frame, ...]  # root first


def parse(text: str) -> Counter[Stack]:
    """Collapsed stacks (`frame;frame;... count` per line) as stack -> samples."""
    stacks: Counter[Stack] = Counter()
    for line in text.splitlines():
        body, _, count = line.rpartition(" ")
        if not body or not count.isdigit():
            continue
        frames = []
        for part in body.split(";"):
            m = _FRAME.match(part)
            if m:  # skips py-spy's "process ..." and "thread ..." pseudo-frames
                frames.append(Frame(m["func"], m["file"]))
        stacks[tuple(frames)] += int(count)
    return stacks


def _has(stack: Stack, file_part: str, func: str | None = None) -> bool:
    return any(file_part in f.file and (func is None or f.func == func) for f in stack)


def _amqp(stack: Stack) -> str:
    if _has(stack, "crawler/frontier/publisher.py"):
        return "AMQP publish + confirm (router)"
    if _has(stack, "aio_pika/message.py", "ack"):
        return "AMQP ack"
    if _has(stack, "crawler/worker/"):
        return "AMQP other calls from the consumer"
    return "AMQP receive, frames, deliveries (aiormq)"


def _extract(frame: Frame) -> str:
    return {
        "_parse": "parse HTML (decode + lxml)",
        "_links": "links: XPath + urljoin",
    }.get(frame.func, "extract: title and fields")


# Innermost match wins. Each rule: a file fragment and the activity (or a function naming it).
FETCH = "fetch (aiohttp or httpx, the address guard, decoding)"
REDIS = "Redis calls (dedup claim and confirm, rate token, quota)"

SINK = "SQL sink (upsert, commit)"
CONSUMER = "consumer's own code (message, decode, pipeline)"

_RULES: tuple[tuple[str, str], ...] = (
    ("crawler/parse/", "extract"),
    ("crawler/frontier/urls.py", "canonicalise + fingerprint (crawler.urls, w3lib)"),
    ("w3lib/", "canonicalise + fingerprint (crawler.urls, w3lib)"),
    ("crawler/dedup/", REDIS),
    ("crawler/frontier/quota.py", REDIS),
    ("crawler/frontier/crawls.py", REDIS),
    ("crawler/fetch/ratelimit.py", REDIS),
    ("crawler/worker/admission.py", REDIS),
    ("/redis/", REDIS),
    ("sqlalchemy/", SINK),
    ("sqlite3/", SINK),
    ("psycopg/", SINK),
    ("crawler/sink/", SINK),
    ("concurrent/futures/", "to_thread hand-off (thread pool submit, worker wake-up)"),
    ("aio_pika/", "amqp"),
    ("aiormq/", "amqp"),
    ("pamqp/", "amqp"),
    ("crawler/frontier/publisher.py", "amqp"),
    ("aiohttp/", FETCH),
    ("multidict/", FETCH),
    ("yarl/", FETCH),
    ("httpx/", FETCH),
    ("httpcore/", FETCH),
    ("h11/", FETCH),
    ("anyio/", FETCH),
    ("crawler/fetch/", FETCH),
    ("tenacity/", "tenacity (retry wrappers)"),
    ("logging/", "logging"),
    ("crawler/frontier/router.py", "router's own code"),
    ("crawler/frontier/", CONSUMER),
    ("crawler/monitor/", "metrics (prometheus_client, counts)"),
    ("prometheus_client/", "metrics (prometheus_client, counts)"),
    ("crawler/worker/", CONSUMER),
)


def activity(stack: Stack) -> str:
    """What a sampled stack was doing, by the innermost frame that says."""
    loading = next((i for i, f in enumerate(stack) if f.func == "_find_and_load"), None)
    if loading is not None:
        caller = stack[loading - 1] if loading else None
        if caller is None or caller.func == "<module>":
            return "start-up (imports)"
        # An import statement run per call: cheap when cached, a path search when it fails.
        return f"import at run time, in {caller.where}"
    if _has(stack, "alembic/"):
        return "start-up (schema check)"
    for frame in reversed(stack):
        for fragment, name in _RULES:
            if fragment in frame.file:
                if name == "amqp":
                    return _amqp(stack)
                if name == "extract":
                    return _extract(frame)
                return name
    if _has(stack, "asyncio/") or _has(stack, "selectors.py"):
        return "event loop (asyncio scheduling, callbacks, epoll)"
    return "other"


def summary(stacks: Counter[Stack], top: int = 25) -> str:
    """Activities by share of samples, then the top functions by own time."""
    total = sum(stacks.values())
    if not total:
        return "no samples"
    by_activity: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for stack, n in stacks.items():
        by_activity[activity(stack)] += n
        if stack:
            own[stack[-1].where] += n
    lines = [
        f"{total} samples (a thread not idle at one tick of py-spy: ~10 ms at 100 Hz)",
        "",
        "where the CPU goes:",
    ]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in by_activity.most_common()]
    lines += ["", f"top {top} functions by own time:"]
    lines += [f"  {100 * n / total:5.1f}%  {where}" for where, n in own.most_common(top)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Print the summary of a py-spy raw profile."""
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    print(summary(parse(args.profile.read_text()), args.top))


if __name__ == "__main__":
    main()
