# The emulation manager and the Swarm bootstrapper (one image, two commands:
# `collapsar manager --docker` and `collapsar manager --bootstrap`).
# Built by docker/Makefile from a staged context (build/manager): the
# Python wheels are downloaded on the host, pinned, so the build itself
# needs no network; the eBPF counters and Aeron are built on the host,
# which runs the same Debian release as the base image.
ARG BASE=collapsar/base:bookworm
# The venv is made in a first stage, so the wheels never become a layer of
# the image (the legacy builder has no RUN --mount).
FROM ${BASE} AS venv
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/collapsar/venv \
 && /opt/collapsar/venv/bin/pip install -q --no-index --find-links /tmp/wheels -r /tmp/wheels/requirements.txt

FROM ${BASE}
ENV PATH=/opt/collapsar/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 \
    COLLAPSAR_AERON_HOME=/opt/collapsar/aeron
COPY --from=venv /opt/collapsar/venv /opt/collapsar/venv
COPY aeron /opt/collapsar/aeron
COPY src /opt/collapsar/src
# Editable: collapsar.tcal finds its built counters library next to its source.
RUN pip install -q --no-index --no-deps --no-build-isolation -e /opt/collapsar/src \
 && collapsar --help >/dev/null
LABEL org.collapsar.image=manager
CMD ["collapsar", "manager", "--help"]
