# The pricewatch worker: runtime dependencies only (no embedded Temporal or Postgres).
# Stages: `worker` (plain checks, the default build) and `render` (the same worker with
# Chromium and Playwright, for `PRICEWATCH_RENDER=true`). docker-compose.yml builds both.
FROM python:3.12.8-slim-bookworm AS worker

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1

WORKDIR /app
COPY requirements.lock ./
RUN pip install --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY pricewatch ./pricewatch
COPY workflows ./workflows
COPY readers ./readers
COPY fetchers ./fetchers
COPY activities ./activities
COPY client ./client
COPY surfaces ./surfaces
COPY workers ./workers
RUN pip install --no-deps .

RUN useradd --system --uid 10001 --no-create-home pricewatch
USER 10001

EXPOSE 9464 8081
HEALTHCHECK --interval=10s --timeout=3s --retries=6 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8081/readyz', timeout=2)"
CMD ["pricewatch", "worker"]

# The render worker: Debian's Chromium headless shell and a pinned Playwright (no browser
# download at run time).
FROM worker AS render
USER root
RUN apt-get update && apt-get install -y --no-install-recommends chromium-headless-shell \
    fonts-liberation \
    && rm -rf /var/lib/apt/lists/*
RUN pip install --no-deps playwright==1.65.2 greenlet==3.5.6
ENV PRICEWATCH_CHROMIUM=/usr/bin/chromium-headless-shell PRICEWATCH_RENDER=true
USER 10001

# The default build (`docker build .`): the plain worker.
FROM worker
