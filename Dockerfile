# foresail daemon image: slim, non-root, every dependency pinned (deploy/constraints.txt), health-checked.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN useradd --create-home --uid 10001 foresail && mkdir -p /var/lib/foresail && chown foresail /var/lib/foresail
WORKDIR /opt/foresail
COPY pyproject.toml README.md ./
COPY deploy/constraints.txt deploy/constraints.txt
COPY daemon daemon
COPY mape mape
COPY capacity capacity
COPY forecasting forecasting
COPY recovery recovery
COPY config config
COPY simulator simulator
COPY backends backends
COPY memory memory
COPY messages messages
COPY planning planning
RUN pip install --constraint deploy/constraints.txt . && foresail check-config --no-connect config/example.yaml

USER 10001
WORKDIR /var/lib/foresail
EXPOSE 9464
# /healthz answers 503 once iterations stop; the port is server.port of the config. The default command
# runs the twin on wall time (a loop a minute, like a real job) with its health server, so the check passes.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=4)"
ENTRYPOINT ["foresail"]
CMD ["run", "--config", "/opt/foresail/config/example.yaml", "--speedup", "1"]
