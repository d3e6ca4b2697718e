# The pricewatch worker: runtime dependencies only (no embedded Temporal or Postgres).
FROM python:3.12.8-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1

WORKDIR /app
COPY requirements.lock ./
RUN pip install --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY pricewatch ./pricewatch
COPY workflows ./workflows
COPY activities ./activities
COPY workers ./workers
RUN pip install --no-deps .

RUN useradd --system --uid 10001 --no-create-home pricewatch
USER 10001

EXPOSE 9464 8081
HEALTHCHECK --interval=10s --timeout=3s --retries=6 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8081/readyz', timeout=2)"
CMD ["pricewatch", "worker"]
