# syntax=docker/dockerfile:1
#
# The affinity coordinator image (also runs `affinity processor`, `jobmodel show`, ...).
#
#   docker build -t affinity-coordinator:0.1.0 .
#   docker run --rm affinity-coordinator:0.1.0 --help
#   docker run --rm -v $PWD/job.yaml:/etc/affinity/job.yaml:ro --read-only --tmpfs /tmp \
#     -e AFFINITY_ZK_CONNECT=zk:2181 -p 8080:8080 \
#     affinity-coordinator:0.1.0 coordinator run --config /etc/affinity/job.yaml
#
# Two stages on the same base image (the venv's python is a symlink into it):
#   builder  builds the project wheel and installs it with its dependencies into /opt/affinity;
#   final    copies /opt/affinity only: no compiler, no pip, no source tree, no build cache.
# Every dependency ships manylinux wheels, so the builder needs no compiler either.
# Runs as the unprivileged user 10001 and needs no writable path but /tmp, so it works with
# readOnlyRootFilesystem (the Helm chart mounts an emptyDir at /tmp).
# Pin the base by digest in production: --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:...

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/affinity \
 && /opt/affinity/bin/pip install --upgrade pip
WORKDIR /src
# README* may be absent; pyproject.toml makes the COPY non-empty.
COPY pyproject.toml README* ./
COPY coordinator/ coordinator/
COPY groupers/ groupers/
COPY metadata/ metadata/
COPY locality/ locality/
RUN /opt/affinity/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/affinity/bin/pip install /wheels/affinity_coordinator-*.whl \
 && /opt/affinity/bin/python -m compileall -q /opt/affinity/lib \
 && /opt/affinity/bin/pip uninstall -y pip setuptools \
 && /opt/affinity/bin/affinity --help >/dev/null

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="affinity-coordinator" \
      org.opencontainers.image.description="Host-affinity job coordinator for stateful pipelines on Spark" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 affinity \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin affinity
COPY --from=builder /opt/affinity /opt/affinity
ENV PATH=/opt/affinity/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
WORKDIR /tmp
# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["affinity"]
CMD ["--help"]
