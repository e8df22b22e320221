# foresail daemon image: slim, non-root, dependencies pinned by pyproject.toml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN useradd --create-home --uid 10001 foresail
WORKDIR /opt/foresail
COPY pyproject.toml README.md ./
COPY daemon daemon
COPY mape mape
COPY capacity capacity
COPY forecasting forecasting
COPY recovery recovery
COPY config config
COPY simulator simulator
RUN pip install . && foresail check-config config/example.yaml

USER foresail
WORKDIR /home/foresail
ENTRYPOINT ["foresail"]
CMD ["run", "--config", "/opt/foresail/config/example.yaml"]
