# The workload node: wl-node (server) and wl-client (load generator), built
# on the host (same Debian release as the base), plus iperf3 and ping from
# the base, for services whose topology entry names no image.
ARG BASE=collapsar/base:bookworm
FROM ${BASE}
COPY bin/ /usr/local/bin/
LABEL org.collapsar.image=node
CMD ["wl-node", "--help"]
