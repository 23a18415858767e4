# The zkcoord image used by compose.yaml: the package and its command line on Debian's Python.
FROM python:3.11-slim-bookworm
WORKDIR /src
COPY setup.cfg pyproject.toml README.md ./
COPY zkcoord ./zkcoord
RUN pip install --no-cache-dir . && useradd --system --home /var/lib/zkcoord zkcoord \
    && mkdir -p /var/lib/zkcoord && chown zkcoord /var/lib/zkcoord
USER zkcoord
ENV ZKCOORD_HOME=/var/lib/zkcoord
CMD ["zkcoord", "--help"]
