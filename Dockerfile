# gpuwatch node exporter (`gpuwatch export`) on NVIDIA's DCGM image, so the `dcgm` source finds
# libdcgm.so.4 and DCGM's Python bindings (pydcgm is not on PyPI; it ships with DCGM).
#
#   make image    # this and Dockerfile.gpuwatch, tagged as the chart pulls them
#   docker build -t ghcr.io/gpuwatch/gpuwatch-exporter:<version> .
#
# Runs as uid 1000 by default: enough for the nvml source and for DCGM without profiling.
# Profiling fields (DCGM_FI_PROF_*) with an embedded hostengine need root + CAP_SYS_ADMIN, and the
# kubelet pod-resources socket (root-owned) needs uid 0: the Helm chart sets runAsUser 0, drops
# ALL capabilities and adds SYS_ADMIN only when profiling is on (README "Permissions").
ARG DCGM_IMAGE=nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04

FROM ${DCGM_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
 && rm -rf /var/lib/apt/lists/*
RUN python3.11 -m venv /opt/gpuwatch
COPY pyproject.toml README.md hatch_build.py /src/
COPY gpuwatch /src/gpuwatch
# the wheel carries the Streamlit pages (pyproject's force-include): without them it does not build
COPY app /src/app
# the exporter extra only: prometheus-client, nvidia-ml-py, grpcio, protobuf (no pandas/duckdb)
RUN /opt/gpuwatch/bin/pip install --no-cache-dir "/src[exporter]"

FROM ${DCGM_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 1000 --no-create-home --shell /usr/sbin/nologin gpuwatch
COPY --from=build /opt/gpuwatch /opt/gpuwatch
ENV PATH=/opt/gpuwatch/bin:$PATH \
    PYTHONPATH=/usr/share/datacenter-gpu-manager-4/bindings/python3 \
    PYTHONUNBUFFERED=1
USER 1000
EXPOSE 9400
ENTRYPOINT ["gpuwatch", "export"]
CMD ["--listen", ":9400"]
