# The dashboard: the manager image (Python, the collapsar package and the
# built page, dashboard/web/dist) running `collapsar dashboard`.  One more
# tag, one metadata layer: the page and its server are already there.
ARG MANAGER=collapsar/manager:0.1.0
FROM ${MANAGER}
LABEL org.collapsar.image=dashboard
EXPOSE 8640
CMD ["collapsar", "dashboard", "--manager", "http://127.0.0.1:7077", "--port", "8640"]
