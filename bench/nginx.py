"""Debian's nginx serving the bench site: started by the bench on loopback, never as the system service."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.procs import children_of
from bench.site import SiteSpec

START_TIMEOUT = 10.0


def binary() -> str:
    """Path of nginx, installed from the distribution first if it is missing (needs root)."""
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found:
        return found
    if os.geteuid() != 0:
        raise SystemExit("bench: nginx is not installed; run `sudo apt-get install -y nginx` first")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "nginx"], check=True, env=env, stdout=subprocess.DEVNULL
    )
    # Debian's package may start the system service where there is an init; the bench never uses it.
    return shutil.which("nginx") or "/usr/sbin/nginx"


# --redirects: every page but the index moved, as sites that fold one spelling of a path into another
# do: /p/N.html answers 301 to /p/N, which serves the page. Its relative links (M.html) resolve to the
# old spelling again, so every page costs one redirect, whichever link led to it.
MOVED = (
    "        location ~ ^/p/([0-9]+)\\.html$ {{ return 301 /p/$1; }}\n"
    "        location ~ ^/p/([0-9]+)$ {{ default_type text/html; try_files /p/$1.html =404; }}\n"
)


def config(
    spec: SiteSpec, site: Path, state: Path, *, redirects: bool = False, access_log: Path | None = None
) -> str:
    """nginx.conf serving each host's directory on its own IP; every path under `state`."""
    servers = "\n".join(
        f"    server {{\n"
        f"        listen {host}:{spec.port};\n"
        f"        server_name {host};\n"
        f"        root {site / host};\n"
        f"        index index.html;\n"
        f"{MOVED.format(root=site / host) if redirects else ''}"
        f"    }}"
        for host in spec.hosts
    )
    return frame(servers, state, connections=4096, open_files=8000, access_log=access_log)


# One line per request: host, path, status, body bytes and when (Unix seconds, ms): enough to count
# what a crawl fetched twice, and how fast it asked each host.
REQUEST_LOG = "log_format requests '$server_addr $request_uri $status $body_bytes_sent $msec';"


def frame(
    servers: str,
    state: Path,
    *,
    connections: int,
    open_files: int,
    access_log: Path | None = None,
    log_format: str = REQUEST_LOG,
) -> str:
    """A whole nginx.conf around the `servers` blocks; every path under `state`; no access log unless
    `access_log` (then in `log_format`'s format, a `log_format NAME '...';` line)."""
    # As root, workers would switch to `nobody`, who may not read a private temp directory.
    user = "user root root;\n" if os.geteuid() == 0 else ""
    named = log_format.split()[1]
    requests = f"{log_format}\n    access_log {access_log} {named};" if access_log else "access_log off;"
    # The open-file cache keeps a descriptor per cached page: keep it well under the descriptor limit.
    return f"""{user}worker_processes 1;
worker_rlimit_nofile 65536;
pid {state}/nginx.pid;
error_log {state}/error.log warn;
events {{
    worker_connections {connections};
}}
http {{
    types {{
        text/html html;
    }}
    default_type application/octet-stream;
    charset utf-8;
    {requests}
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 65;
    keepalive_requests 1000000;
    open_file_cache max={open_files} inactive=120s;
    client_body_temp_path {state}/client_body;
    proxy_temp_path {state}/proxy;
    fastcgi_temp_path {state}/fastcgi;
    uwsgi_temp_path {state}/uwsgi;
    scgi_temp_path {state}/scgi;
{servers}
}}
"""


@dataclass(frozen=True, slots=True)
class Nginx:
    """A running nginx: its master process (workers are its children)."""

    master: int
    state: Path

    def pids(self) -> list[int]:
        """The master and its workers."""
        return [self.master, *children_of(self.master)]


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


@contextmanager
def serve(
    spec: SiteSpec, site: Path, state: Path, *, redirects: bool = False, access_log: Path | None = None
) -> Iterator[Nginx]:
    """Run nginx in the foreground of a child process until the block ends (`redirects`: see MOVED)."""
    state.mkdir(parents=True, exist_ok=True)
    text = config(spec, site, state, redirects=redirects, access_log=access_log)
    with run(text, [(h, spec.port) for h in spec.hosts], state) as server:
        yield server


@contextmanager
def run(text: str, listens: Sequence[tuple[str, int]], state: Path) -> Iterator[Nginx]:
    """Run nginx with the config `text` until the block ends, once it listens on every address."""
    state.mkdir(parents=True, exist_ok=True)
    conf = state / "nginx.conf"
    conf.write_text(text)
    # -e: the error log before the config is read (else the default under /var/log).
    argv = [binary(), "-p", str(state), "-e", str(state / "error.log"), "-c", str(conf)]
    proc = subprocess.Popen([*argv, "-g", "daemon off;"], stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not all(_listening(h, port) for h, port in listens):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (state / "error.log").read_text() if (state / "error.log").exists() else ""
                ports = ", ".join(sorted({str(port) for _, port in listens}))
                raise SystemExit(f"bench: nginx did not start (is port {ports} taken?)\n{log}")
            time.sleep(0.05)
        yield Nginx(proc.pid, state)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGQUIT)  # graceful: finish open requests
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
