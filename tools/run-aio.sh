#!/bin/bash
# Install cyborg into a virtualenv and run the all-in-one.
#
#   tools/run-aio.sh [--port 6666] [--state-dir ~/.local/state/cyborg]
#
# Creates (or reuses) .venv, installs the project into it with its "aio"
# extra (the real Placement and the openstack client with its accelerator
# commands) and runs cyborg-aio: API, conductor, agent and Placement in
# one process, SQLite in the state directory.  It prints the openstack
# command to try.  When port 6666 is taken it says so: pass --port N.
# Ctrl-C stops it.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV=${VENV:-$PWD/.venv}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}

if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -c 'import ensurepip' 2>/dev/null; then
        [ "$(id -u)" -eq 0 ] ||
            { echo "run-aio: install python3-venv first" >&2; exit 1; }
        DEBIAN_FRONTEND=noninteractive apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv
    fi
    "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.cyborg-aio-$(cat requirements.txt setup.cfg | sha1sum | cut -c1-16)"
if [ ! -e "$stamp" ]; then
    echo "==> installing cyborg into $VENV" >&2
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -r requirements.txt
    "$VENV/bin/pip" install -q -e ".[aio]"
    rm -f "$VENV"/.cyborg-aio-*
    touch "$stamp"
fi
exec "$VENV/bin/cyborg-aio" "$@"
