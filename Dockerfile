# The zkcoord image used by compose.yaml: the package and its command line in a virtualenv on Debian's Python.
# BASE is the official python:3.11-slim-bookworm by default; scripts/compose.sh builds on a Debian bookworm image
# it makes itself with debootstrap (no registry needed), whose Python is installed here from Debian's packages.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
RUN if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi
# PIP_OPTIONS: scripts/compose.sh builds every wheel on the host first (.wheels/, through the host's own PyPI access)
# and installs from them alone: "--no-index --find-links /src/.wheels zkcoord".  By default: this source, from PyPI.
ARG PIP_OPTIONS=.
WORKDIR /src
# .dockerignore lets through only setup.cfg, pyproject.toml, README.md, zkcoord/ and .wheels/.
COPY . ./
RUN python3 -m venv /opt/zkcoord \
    && /opt/zkcoord/bin/pip install --no-cache-dir --disable-pip-version-check ${PIP_OPTIONS} \
    && useradd --system --home /var/lib/zkcoord zkcoord \
    && mkdir -p /var/lib/zkcoord/journal /var/lib/zkcoord/data && chown -R zkcoord /var/lib/zkcoord
# (journal/ and data/ made here: a new volume is filled from the image, so they are zkcoord's from the start)
ENV PATH=/opt/zkcoord/bin:$PATH
USER zkcoord
ENV ZKCOORD_HOME=/var/lib/zkcoord
CMD ["zkcoord", "--help"]
