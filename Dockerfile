# syntax=docker/dockerfile:1
# The lite server image.
#   CPU (default):  docker build -t lite .
#   CUDA:           docker build --build-arg VARIANT=cuda -t lite:cuda .
# Run:  docker run -p 8001:8001 -p 8002:8002 -v $PWD/models:/models:ro lite
#       (the model repository is a read-only volume at /models; metrics on :8002)
ARG VARIANT=cpu

FROM python:3.11-slim AS base-cpu
ENV LITE_ORT_PACKAGE=onnxruntime==1.32.0

FROM nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04 AS base-cuda
# The distribution's Python: its package version moves with the base image, which is pinned.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
ENV LITE_ORT_PACKAGE=onnxruntime-gpu==1.31.1

# hadolint ignore=DL3006
FROM base-${VARIANT}
ENV VIRTUAL_ENV=/opt/lite PATH=/opt/lite/bin:$PATH PYTHONUNBUFFERED=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY lite ./lite
COPY converter ./converter
COPY serving ./serving
COPY train ./train
# The project itself, ONNX Runtime pinned through LITE_ORT_PACKAGE above, and onnx, with which
# lite's ONNX Runtime engine writes the models it hands ONNX Runtime (the ort/gpu extras' pair).
# tests/test_deploy.py runs this exact line in a fresh virtual environment and serves a model.
# hadolint ignore=DL3013
RUN python3 -m venv "$VIRTUAL_ENV" \
    && pip install --no-cache-dir ".[serve]" "onnx>=1.17,<2" "$LITE_ORT_PACKAGE" \
    && useradd --create-home --uid 10001 lite
USER 10001
WORKDIR /home/lite
VOLUME ["/models"]
EXPOSE 8001 8002
# grpc.health.v1 on the server itself (the server answers it without a token).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python3", "-m", "serving.healthcheck", "127.0.0.1:8001"]
ENTRYPOINT ["lite"]
CMD ["serve", "--repository", "/models"]
