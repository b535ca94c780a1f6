# syntax=docker/dockerfile:1
# One image for every program: crawler-consume (the default command), `crawler db upgrade` as a
# one-shot job, `crawler seed|status|dead ...`, crawler-gateway (port 8900) and crawler-api (port
# 8000), each started by its deployment's command (deploy/compose.yaml, deploy/k8s/). Targets:
#   runtime (the default, last stage)  the plain worker, no browser
#   render                             runtime plus Chromium, for crawler-gateway replicas that render (render_js)
#   demo-site                          the demo shops, only for deploy/compose.yaml's end-to-end crawl
# No container engine runs where this file is tested: tests/deploy/test_image.py checks its stages and
# COPY sources, and runs the same scripts/build-wheel and scripts/install-wheel it runs.
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY crawler/ crawler/
COPY migrations/ migrations/
COPY scripts/build-wheel scripts/build-wheel
RUN bash scripts/build-wheel /wheels

FROM python:${PYTHON_VERSION}-slim-bookworm AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/crawler/bin:$PATH \
    CRAWLER_CONFIG=/etc/crawler/domains.yaml
COPY scripts/install-wheel /usr/local/bin/install-wheel
COPY --from=build /wheels /tmp/wheels
# Dependencies come from the package index at build time; none is compiled (all ship wheels).
RUN bash /usr/local/bin/install-wheel /opt/crawler /tmp/wheels && rm -rf /tmp/wheels
# A fixed uid, so Kubernetes' runAsNonRoot can check it and volumes can be owned by it.
RUN useradd --system --uid 10001 --user-group --home-dir /app --create-home crawler
# The WARC archive's mount point (CRAWLER_ARCHIVE_DIR in deploy/compose.yaml and deploy/k8s/), owned by
# that uid: a new named volume mounted here takes its owner, so the workers can write to it. Nothing
# is written there unless a domain has `archive: true` (docs/archive.md).
RUN install -d -o 10001 -g 10001 -m 0750 /var/lib/crawler /var/lib/crawler/archive
WORKDIR /app
USER 10001:10001
# crawler-consume's --metrics-port (serves /metrics and /healthz); the gateway's and the API's
# --listen ports as the deployments give them.
EXPOSE 9410 8900 8000
# The worker's /healthz (its heartbeat's age); CRAWLER_HEALTH_URL points it elsewhere (the gateway's,
# the API's). A one-shot job (db upgrade, seed) turns it off: compose's `healthcheck: {disable: true}`.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen(os.environ.get('CRAWLER_HEALTH_URL', 'http://127.0.0.1:9410/healthz'), timeout=4)"
CMD ["crawler-consume", "--metrics-port", "9410", "--metrics-addr", "0.0.0.0", "--log-format", "json"]

FROM base AS render
USER root
# Debian's headless Chromium (crawler-gateway's render.executable), only in this target, so plain
# workers stay small.
RUN apt-get update \
    && apt-get install -y --no-install-recommends chromium-headless-shell fonts-liberation \
    && rm -rf /var/lib/apt/lists/*
USER 10001:10001

FROM base AS demo-site
COPY demo/ /app/demo/
EXPOSE 8080
HEALTHCHECK NONE
# Each shop in a container of its own: `python -m demo --host shop.test --bind 0.0.0.0`.
CMD ["python", "-m", "demo", "--host", "shop.test", "--bind", "0.0.0.0"]

FROM base AS runtime
