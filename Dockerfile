# syntax=docker/dockerfile:1
#
# respgate gateway image.
#
#   docker build -t respgate .
#   docker run --rm -p 9000:9000 -e RESPGATE_UPSTREAM_URL=http://host.docker.internal:8000 respgate
#   (Ollama or another chat-completions-only server: add -e RESPGATE_UPSTREAM_KIND=chat)
#
# Two stages: the builder installs the package and its runtime dependencies (no dev extras) into
# a virtualenv; the final image is python:3.11-slim plus that virtualenv, run as a non-root user.

ARG PYTHON_IMAGE=python:3.11-slim

# ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src

# Runtime dependencies first, read from pyproject.toml with the stdlib's tomllib, so this layer is
# rebuilt only when pyproject.toml changes, not on every source edit.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

# Then the package itself (not editable: the source tree does not go into the final image). The
# Alembic migrations are the `migrations` package of the wheel; `respgate migrate` on a scratch
# SQLite file, run outside the source tree, proves they shipped.
COPY . .
RUN pip install --no-deps . \
    && pip check \
    && python -I -c "import app.main" \
    && respgate --help > /dev/null \
    && (cd / && respgate migrate --data-dir /tmp/migrate-check --log-level warning) \
    && rm -rf /tmp/migrate-check

# ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="respgate" \
      org.opencontainers.image.description="Stateful, tool-executing OpenAI Responses API gateway" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RESPGATE_DATA_DIR=/data

RUN groupadd --system --gid 10001 respgate \
    && useradd --system --uid 10001 --gid respgate --no-log-init \
        --home-dir /home/respgate --create-home --shell /usr/sbin/nologin respgate \
    && mkdir -p /data \
    && chown respgate:respgate /data

COPY --from=builder /opt/venv /opt/venv

USER 10001:10001
WORKDIR /home/respgate

# Declared after the chown above so a fresh volume inherits respgate:respgate ownership.
VOLUME ["/data"]

EXPOSE 9000

# No curl in slim images: probe /health with the stdlib (port 9000 unless RESPGATE_PORT says
# otherwise). Before the app accepts traffic (e.g. during --wait-for-upstream) it reports unhealthy.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; url = 'http://127.0.0.1:%s/health' % os.environ.get('RESPGATE_PORT', '9000'); sys.exit(0 if urllib.request.urlopen(url, timeout=4).status == 200 else 1)"]

ENTRYPOINT ["respgate"]
CMD ["serve"]
