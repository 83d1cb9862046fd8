#!/bin/bash
# Run the whole test suite (unit + functional) on a Debian machine.
#
#   tools/run-tests.sh [pytest arguments]
#
# Creates (or reuses) the virtualenv .venv, installs the requirements, the
# test requirements and the project into it, makes sure RabbitMQ, MariaDB
# and PostgreSQL answer on 127.0.0.1 (installing them with apt-get when
# they are absent and we are root; starting them only when they are not
# running) and that the Galera provider is installed (the fault matrix
# starts a cluster of its own) and valgrind (a benchmark's test), then
# runs pytest: with no arguments in two stages, every test but the fault
# matrix (tests/faults) and then the fault matrix; with arguments, pytest
# with those.  Exits non-zero when a test fails.
#
# Environment: PYTHON (default python3.11, else python3), VENV (default
# .venv), PYTEST_WORKERS (default 2), CYBORG_SKIP_SERVICES=1 to leave the
# services alone.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
PYTEST_WORKERS=${PYTEST_WORKERS:-2}

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'run-tests: %s\n' "$*" >&2; exit 1; }
is_root() { [ "$(id -u)" -eq 0 ]; }

port_open() {
    # bash's /dev/tcp: no client tools needed to see a port answer.
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

wait_port() {
    local port=$1 name=$2
    for _ in $(seq 1 60); do
        port_open "$port" && return 0
        sleep 1
    done
    die "$name did not start listening on 127.0.0.1:$port"
}

APT_UPDATED=
apt_install() {
    is_root || die "$* missing and not root: install them (apt-get install $*)"
    if [ -z "$APT_UPDATED" ]; then
        log "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -q
        APT_UPDATED=1
    fi
    log "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

start_service() {
    # systemd when it runs, else the package's init script.
    local name=$1
    is_root || die "$name is not running and we are not root to start it"
    log "starting $name"
    if [ -d /run/systemd/system ]; then
        systemctl start "$name"
    else
        service "$name" start
    fi
}

# -- Python -------------------------------------------------------------

mysqlclient_build_deps() {
    # mysqlclient (MariaDB's C driver, test-requirements.txt) builds from
    # source: a C compiler, Python's headers and MariaDB's client library
    # found through pkg-config.
    local headers
    headers=$("$1" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    command -v gcc >/dev/null || apt_install gcc
    [ -e "$headers/Python.h" ] || apt_install python3-dev
    if ! command -v pkg-config >/dev/null || ! {
            pkg-config --exists libmariadb ||
            pkg-config --exists mysqlclient; }; then
        apt_install pkg-config libmariadb-dev
    fi
}

setup_venv() {
    local python=${PYTHON:-}
    if [ -z "$python" ]; then
        python=$(command -v python3.11 || command -v python3) ||
            die "no python3 found"
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        if ! "$python" -m venv --help >/dev/null 2>&1 ||
                ! "$python" -c 'import ensurepip' 2>/dev/null; then
            apt_install python3-venv
        fi
        log "creating $VENV"
        "$python" -m venv "$VENV"
    fi
    # Reinstall only when what decides the install changed.
    local stamp
    stamp="$VENV/.cyborg-installed-$(cat requirements.txt \
        test-requirements.txt setup.cfg | sha1sum | cut -c1-16)"
    if [ ! -e "$stamp" ]; then
        mysqlclient_build_deps "$VENV/bin/python"
        log "installing requirements and the project into $VENV"
        "$VENV/bin/pip" install -q --upgrade pip
        "$VENV/bin/pip" install -q -r requirements.txt \
            -r test-requirements.txt
        "$VENV/bin/pip" install -q -e ".[aio,demo]"
        # One accelerator CLI plugin, python-openstackclient's: this is
        # the virtualenv tools/run-aio.sh runs (doc/source/clients.rst).
        # One made while test-requirements.txt listed python-cyborgclient
        # still has it.
        if "$VENV/bin/pip" show -q python-cyborgclient 2>/dev/null; then
            log "removing python-cyborgclient from $VENV"
            "$VENV/bin/pip" uninstall -q -y python-cyborgclient
        fi
        rm -f "$VENV"/.cyborg-installed-*
        touch "$stamp"
    fi
}

# -- services -------------------------------------------------------------

setup_rabbitmq() {
    if ! port_open 5672; then
        command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
        start_service rabbitmq-server
        wait_port 5672 RabbitMQ
    fi
    # Tests make a vhost each, with rabbitmqctl (root) or the management
    # API; without root the management plugin must answer.
    if ! is_root && ! port_open 15672; then
        log "warning: not root and RabbitMQ's management plugin is off;" \
            "vhosts need rabbitmqctl to work for $(id -un)" \
            "(or: rabbitmq-plugins enable rabbitmq_management)"
    fi
}

setup_mariadb() {
    if ! port_open 3306; then
        command -v mariadbd >/dev/null || command -v mysqld >/dev/null ||
            apt_install mariadb-server
        start_service mariadb
        wait_port 3306 MariaDB
    fi
    # Tests connect over TCP as root without a password; Debian's root
    # uses unix_socket only.  Allow both, like the CI machines.
    if ! "$VENV/bin/python" - <<'EOF' 2>/dev/null; then
import pymysql
pymysql.connect(host='127.0.0.1', user='root', password='').close()
EOF
        is_root || die "MariaDB refuses root@127.0.0.1 without a password"
        log "letting root@localhost log in over TCP without a password"
        mysql -uroot -e "ALTER USER root@localhost IDENTIFIED VIA \
            unix_socket OR mysql_native_password USING PASSWORD('')"
    fi
}

setup_galera() {
    # tests/faults/test_galera.py starts a Galera cluster of its own from
    # MariaDB's binaries: it needs the provider (galera-4) and the rsync
    # state transfer (wsrep_sst_rsync, of mariadb-server; rsync, lsof).
    # Nothing is started here.
    local missing=()
    [ -e /usr/lib/galera/libgalera_smm.so ] || missing+=(galera-4)
    command -v wsrep_sst_rsync >/dev/null || missing+=(mariadb-server)
    command -v rsync >/dev/null || missing+=(rsync)
    command -v lsof >/dev/null || missing+=(lsof)
    if [ ${#missing[@]} -gt 0 ]; then
        apt_install "${missing[@]}"
    fi
}

setup_postgresql() {
    if ! port_open 5432; then
        command -v pg_ctlcluster >/dev/null || apt_install postgresql
        start_service postgresql
        wait_port 5432 PostgreSQL
    fi
    # Tests connect as postgres over TCP with trust authentication.
    if ! "$VENV/bin/python" - <<'EOF' 2>/dev/null; then
import psycopg2
psycopg2.connect(host='127.0.0.1', user='postgres', dbname='postgres').close()
EOF
        is_root || die "PostgreSQL asks postgres@127.0.0.1 for a password"
        local hba
        hba=$(su postgres -c "psql -tAc 'SHOW hba_file'")
        log "trusting local TCP connections in $hba"
        sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' \
            "$hba"
        su postgres -c "psql -tAc 'SELECT pg_reload_conf()'" >/dev/null
    fi
}

setup_tools() {
    # tools/bench/api_instructions.py counts instructions with valgrind's
    # callgrind (its test runs it briefly).
    command -v valgrind >/dev/null || apt_install valgrind
}

setup_venv
setup_tools
if [ -z "${CYBORG_SKIP_SERVICES:-}" ]; then
    setup_rabbitmq
    setup_mariadb
    setup_galera
    setup_postgresql
fi

run_pytest() {
    "$VENV/bin/python" -m pytest -n "$PYTEST_WORKERS" -p no:cacheprovider \
        "$@"
}

if [ $# -gt 0 ]; then
    log "running pytest $* with $PYTEST_WORKERS workers"
    exec "$VENV/bin/python" -m pytest -n "$PYTEST_WORKERS" \
        -p no:cacheprovider "$@"
fi

# Two stages: the suite, then the fault matrix (tests/faults: processes
# killed, services taken away; each test with a hard time bound).  The
# second runs even when the first failed; either failing fails the run.
status=0
log "stage 1: unit + functional tests with $PYTEST_WORKERS workers"
run_pytest tests --ignore=tests/faults || status=1
log "stage 2: the fault matrix (tests/faults) with $PYTEST_WORKERS workers"
run_pytest tests/faults || status=1
exit "$status"
