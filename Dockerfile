# syntax=docker/dockerfile:1
# The lite server image.
#   CPU (default):  docker build -t lite .
#   CUDA:           docker build --build-arg VARIANT=cuda -t lite:cuda .
# Run:  docker run -p 8001:8001 -p 8002:8002 -v $PWD/models:/models:ro lite serve --repository /models
ARG VARIANT=cpu

FROM python:3.11-slim AS base-cpu
ENV LITE_ORT_PACKAGE=onnxruntime

FROM nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04 AS base-cuda
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
ENV LITE_ORT_PACKAGE=onnxruntime-gpu

# hadolint ignore=DL3006
FROM base-${VARIANT}
ENV VIRTUAL_ENV=/opt/lite PATH=/opt/lite/bin:$PATH PYTHONUNBUFFERED=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY lite ./lite
COPY converter ./converter
COPY serving ./serving
COPY train ./train
RUN python3 -m venv "$VIRTUAL_ENV" \
    && pip install --no-cache-dir ".[serve]" "$LITE_ORT_PACKAGE" \
    && useradd --create-home --uid 10001 lite
USER lite
WORKDIR /home/lite
VOLUME ["/models"]
EXPOSE 8001 8002
ENTRYPOINT ["lite"]
CMD ["serve", "--repository", "/models"]
