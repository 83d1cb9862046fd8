#!/bin/bash
# Three compute hosts on one machine: the real Placement and cyborg-api
# under gunicorn, one cyborg-conductor and three cyborg-agents, each agent
# its own host (its own [DEFAULT]host, fake sysfs tree and state
# directory), over the local RabbitMQ and MariaDB.  It ends by showing
# "openstack accelerator device list" with the devices of all three.
#
#   tools/multihost-demo.sh [--no-wait] [--workdir DIR] [--hosts N]
#                           [--fake-only] [--metrics] [--nova-url URL]
#
# --no-wait   stop and clean up right after showing the devices (default:
#             keep running until Ctrl-C, then clean up)
# --workdir   where configs, fake sysfs trees, state and logs go (kept
#             afterwards); default a new temporary directory, removed
# --hosts N   run N agents, demo-host-1..N (default 3)
# --fake-only the agents run only the fake driver (16 FPGA handles each),
#             not the fake hardware of the test scenarios
# --metrics   serve Prometheus metrics: the API's /metrics summed over its
#             workers, the conductor's and each agent's on a port of its
#             own
# --nova-url  send bind outcomes to this Nova (no authentication), e.g. a
#             recording endpoint; by default no events are sent
#
# The benchmarks (doc/source/scaling.rst) deploy with
# "--hosts 1 --fake-only --metrics" and read <workdir>/endpoints once it
# exists: lines "placement URL", "api URL", "conductor_metrics URL" and
# one "agent_metrics HOST URL" per host;
# <workdir>/pids has a "name pid" line per process started (for
# tools/bench/arq_lifecycle.py --cpu-pids).
#
# Environment:
#   VENV              virtualenv to use (default .venv; created, and the
#                     "demo" extra installed into it, when it lacks them)
#   CYBORG_DEMO_NAME  name of the MariaDB databases (<name> and
#                     <name>_placement) and of the RabbitMQ vhost
#                     (default cyborg_demo); none may exist yet (the demo
#                     stops rather than use or drop what it did not make)
#                     and they are dropped again at the end
#   CYBORG_DEMO_DB_URL  MariaDB account that may create databases
#                     (default mysql+pymysql://root@127.0.0.1)
#   CYBORG_DEMO_DB_DRIVER  MariaDB driver of cyborg's own connection:
#                     pymysql (default) or mysqldb (the "mysqlclient" extra,
#                     which must be installed); Placement keeps the URL's
#   CYBORG_DEMO_RABBIT  user:password on the local RabbitMQ (guest:guest);
#                     the vhost is made with rabbitmqctl (needs root)
#
# What runs, with its log in <workdir>/logs:
#   placement     gunicorn placement.wsgi.api:application (noauth2)
#   cyborg-api    gunicorn cyborg.wsgi.api:application (noauth)
#   conductor     cyborg-conductor
#   demo-host-N   cyborg-agent with the fake FPGA plus the fake hardware
#                 of one test scenario (QAT, Intel FPGA, AMD GPU)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
NAME=${CYBORG_DEMO_NAME:-cyborg_demo}
DB_URL=${CYBORG_DEMO_DB_URL:-mysql+pymysql://root@127.0.0.1}
DB_DRIVER=${CYBORG_DEMO_DB_DRIVER:-pymysql}
RABBIT=${CYBORG_DEMO_RABBIT:-guest:guest}
SCENARIOS=(qat intel_fpga amd_gpu)
HOST_COUNT=3
FAKE_ONLY=
METRICS=
NOVA_URL=

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'multihost-demo: %s\n' "$*" >&2; exit 1; }

WAIT=1
WORK=
while [ $# -gt 0 ]; do
    case $1 in
        --no-wait) WAIT= ;;
        --workdir) [ $# -ge 2 ] || die "--workdir needs a directory"
                   WORK=$2; shift ;;
        --hosts) [[ ${2:-} =~ ^[1-9][0-9]?$ ]] ||
                     die "--hosts needs a number from 1 to 99"
                 HOST_COUNT=$2; shift ;;
        --fake-only) FAKE_ONLY=1 ;;
        --metrics) METRICS=1 ;;
        --nova-url) [ $# -ge 2 ] || die "--nova-url needs a URL"
                    NOVA_URL=$2; shift ;;
        -h|--help) sed -n '2,47p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
    shift
done
HOSTS=()
for i in $(seq 1 "$HOST_COUNT"); do HOSTS+=("demo-host-$i"); done
[[ $NAME =~ ^[a-z][a-z0-9_]{0,40}$ ]] ||
    die "CYBORG_DEMO_NAME must be lower-case letters, digits and _"

# -- the virtualenv -------------------------------------------------------

if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "${PYTHON:-$(command -v python3.11 || command -v python3)}" -m venv "$VENV"
fi
PY=$VENV/bin/python
if ! "$PY" -c 'import cyborg, placement, gunicorn' \
        2>/dev/null || [ ! -x "$VENV/bin/openstack" ]; then
    log "installing cyborg with its demo extra into $VENV"
    "$VENV/bin/pip" install -q -r requirements.txt
    "$VENV/bin/pip" install -q -e ".[demo]"
fi

# -- clean-up, whatever happens ---------------------------------------------

REMOVE_WORK=
if [ -z "$WORK" ]; then
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/cyborg-demo.XXXXXX")
    REMOVE_WORK=1
fi
mkdir -p "$WORK/logs"
WORK=$(cd "$WORK" && pwd)
# "name pid" of each process this run starts (a kept --workdir held the
# last run's).
: >"$WORK/pids"
PIDS=()
# What this run made, and only that, is dropped at the end.
MADE_DBS=()
MADE_VHOST=

sql() {
    "$PY" - "$DB_URL" "$1" <<'EOF'
import sys
import sqlalchemy as sa
engine = sa.create_engine(sys.argv[1], isolation_level='AUTOCOMMIT')
with engine.connect() as connection:
    connection.execute(sa.text(sys.argv[2]))
EOF
}

# existing_databases NAME...: those of the NAMEs the server has.
existing_databases() {
    "$PY" - "$DB_URL" "$@" <<'EOF'
import sys
import sqlalchemy as sa
engine = sa.create_engine(sys.argv[1])
query = sa.text('SELECT schema_name FROM information_schema.schemata '
                'WHERE schema_name IN :names').bindparams(
    sa.bindparam('names', expanding=True))
with engine.connect() as connection:
    print(' '.join(sorted(connection.scalars(query,
                                             {'names': sys.argv[2:]}))))
EOF
}

cleanup() {
    set +e
    trap - EXIT INT TERM
    if [ ${#PIDS[@]} -gt 0 ]; then
        log "stopping ${#PIDS[@]} processes"
        kill -TERM "${PIDS[@]}" 2>/dev/null
        for _ in $(seq 1 50); do
            kill -0 "${PIDS[@]}" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "${PIDS[@]}" 2>/dev/null
        wait 2>/dev/null
    fi
    local db
    if [ ${#MADE_DBS[@]} -gt 0 ]; then
        for db in "${MADE_DBS[@]}"; do
            sql "DROP DATABASE IF EXISTS $db"
        done
    fi
    [ -z "$MADE_VHOST" ] || rabbitmqctl -q delete_vhost "$NAME" >/dev/null
    if [ -n "$REMOVE_WORK" ]; then
        rm -rf "$WORK"
    else
        log "configs and logs kept in $WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME COMMAND...: run in the background, log to logs/NAME.log.
start() {
    local name=$1
    shift
    "$@" >"$WORK/logs/$name.log" 2>&1 </dev/null &
    PIDS+=($!)
    echo "$name $!" >>"$WORK/pids"
}

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for WHAT SECONDS PYTHON-EXPRESSION (true when ready); the
# expression sees requests as r.
wait_for() {
    local what=$1 seconds=$2 check=$3
    if ! "$PY" - "$seconds" "$check" <<'EOF'; then
import sys, time
import requests as r
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    try:
        if eval(sys.argv[2]):
            sys.exit(0)
    except (r.RequestException, OSError, ValueError, KeyError):
        pass
    time.sleep(0.5)
sys.exit(1)
EOF
        tail -n 20 "$WORK"/logs/*.log >&2
        die "$what did not come up within $2 s (logs above, in $WORK/logs)"
    fi
}

# -- database and message queue --------------------------------------------

command -v rabbitmqctl >/dev/null ||
    die "rabbitmqctl not found: the demo makes its vhost with it (as root)"
# Names already taken (a demo running, or one that was killed) are
# refused, not shared: the end of this run would drop them.
taken=$(existing_databases "$NAME" "${NAME}_placement")
[ -z "$taken" ] ||
    die "database(s) $taken exist already (another demo running, or" \
        "left behind): choose other names with CYBORG_DEMO_NAME, or drop them"
vhosts=$(rabbitmqctl -q list_vhosts) ||
    die "rabbitmqctl list_vhosts failed (the demo needs root and RabbitMQ)"
# Newer rabbitmqctl print a "name" heading even with -q.
if sed '1{/^name$/d}' <<<"$vhosts" | grep -qxF "$NAME"; then
    die "RabbitMQ vhost $NAME exists already (another demo running, or" \
        "left behind): choose another name with CYBORG_DEMO_NAME, or" \
        "delete it (rabbitmqctl delete_vhost $NAME)"
fi
log "databases $NAME and ${NAME}_placement, RabbitMQ vhost $NAME"
for db in "$NAME" "${NAME}_placement"; do
    sql "CREATE DATABASE $db CHARACTER SET utf8mb4"
    MADE_DBS+=("$db")
done
# add_vhost succeeds on a vhost that exists: it was checked above.
rabbitmqctl -q add_vhost "$NAME" >/dev/null
MADE_VHOST=1
rabbitmqctl -q set_permissions -p "$NAME" "${RABBIT%%:*}" '.*' '.*' '.*' \
    >/dev/null

# -- Placement -------------------------------------------------------------

PLACEMENT_PORT=$(free_port)
PLACEMENT_URL=http://127.0.0.1:$PLACEMENT_PORT
mkdir -p "$WORK/placement"
cat >"$WORK/placement/placement.conf" <<EOF
[api]
# No Keystone in this demo: Placement trusts the token "admin".
auth_strategy = noauth2

[placement_database]
connection = $DB_URL/${NAME}_placement?charset=utf8mb4
EOF
log "Placement on $PLACEMENT_URL"
"$VENV/bin/placement-manage" --config-file "$WORK/placement/placement.conf" \
    db sync >"$WORK/logs/placement-db-sync.log" 2>&1
OS_PLACEMENT_CONFIG_DIR=$WORK/placement start placement \
    "$VENV/bin/gunicorn" --no-control-socket --workers 1 --threads 4 \
    --bind "127.0.0.1:$PLACEMENT_PORT" placement.wsgi.api:application
wait_for Placement 60 "r.get('$PLACEMENT_URL/').status_code == 200"

# Nova's compute service makes each host's compute node provider; here
# the demo makes them.
"$PY" - "$PLACEMENT_URL" "${HOSTS[@]}" <<'EOF'
import sys
import requests
url, hosts = sys.argv[1], sys.argv[2:]
headers = {'X-Auth-Token': 'admin',
           'OpenStack-API-Version': 'placement 1.20'}
for host in hosts:
    requests.post(url + '/resource_providers', json={'name': host},
                  headers=headers, timeout=30).raise_for_status()
EOF

# -- cyborg ------------------------------------------------------------------

API_PORT=$(free_port)
API_URL=http://127.0.0.1:$API_PORT
cat >"$WORK/cyborg.conf" <<EOF
[DEFAULT]
transport_url = rabbit://$RABBIT@127.0.0.1:5672/$NAME

[database]
connection = ${DB_URL/#mysql+pymysql:/mysql+$DB_DRIVER:}/$NAME?charset=utf8mb4

[api]
# No Keystone in this demo: identities come from headers.
auth_strategy = noauth

[placement]
auth_type = none
endpoint_override = $PLACEMENT_URL

EOF
if [ -n "$NOVA_URL" ]; then
    cat >>"$WORK/cyborg.conf" <<EOF

[nova]
auth_type = none
endpoint_override = $NOVA_URL
EOF
else
    cat >>"$WORK/cyborg.conf" <<EOF

[nova]
# No Nova to tell about binds.
send_events = false
EOF
fi
CONDUCTOR_METRICS_PORT=
AGENT_METRICS_PORTS=()
API_ENV=()
if [ -n "$METRICS" ]; then
    CONDUCTOR_METRICS_PORT=$(free_port)
    cat >>"$WORK/cyborg.conf" <<EOF

[metrics]
enabled = true
conductor_port = $CONDUCTOR_METRICS_PORT
EOF
    # The API's workers record into files there; /metrics sums them.
    mkdir -p "$WORK/api-metrics"
    API_ENV=(PROMETHEUS_MULTIPROC_DIR="$WORK/api-metrics")
fi
"$VENV/bin/cyborg-dbsync" --config-file "$WORK/cyborg.conf" upgrade \
    >"$WORK/logs/cyborg-dbsync.log" 2>&1

cat >"$WORK/conductor.conf" <<EOF
[DEFAULT]
host = demo-conductor
state_path = $WORK/conductor
EOF
log "cyborg-conductor"
start conductor "$VENV/bin/cyborg-conductor" \
    --config-file "$WORK/cyborg.conf" --config-file "$WORK/conductor.conf"
# An agent's first report to a conductor not yet listening would wait for
# the RPC timeout (a minute) before it is sent again.
wait_for cyborg-conductor 120 \
    "'cyborg-conductor started' in open('$WORK/logs/conductor.log').read()"

log "cyborg-api on $API_URL"
# A worker gunicorn replaces leaves its metrics files: its child_exit hook
# folds them into archives (nothing without PROMETHEUS_MULTIPROC_DIR).
echo 'from cyborg.api.metrics_files import child_exit' \
    >"$WORK/gunicorn.conf.py"
start cyborg-api env OS_CYBORG_CONFIG="$WORK/cyborg.conf" "${API_ENV[@]}" \
    "$VENV/bin/gunicorn" --config "$WORK/gunicorn.conf.py" \
    --no-control-socket --workers 2 \
    --bind "127.0.0.1:$API_PORT" cyborg.wsgi.api:application

for i in "${!HOSTS[@]}"; do
    host=${HOSTS[$i]}
    scenario=${SCENARIOS[$((i % ${#SCENARIOS[@]}))]}
    mkdir -p "$WORK/$host/state" "$WORK/$host/sys"
    if [ -n "$FAKE_ONLY" ]; then
        drivers=fake_driver
    else
        drivers=$(PYTHONPATH=$ROOT "$PY" - "$scenario" "$WORK/$host/sys" <<'EOF'
import sys
from tests.fixtures import sysfs
_tree, options = sysfs.build(sys.argv[1], sys.argv[2])
print(','.join(['fake_driver'] + options['enabled_drivers']))
EOF
)
    fi
    cat >"$WORK/$host/agent.conf" <<EOF
[DEFAULT]
host = $host
state_path = $WORK/$host/state

[agent]
enabled_drivers = $drivers
sysfs_root = $WORK/$host/sys
resource_provider_name = $host
# The fake trees get no udev events.
hotplug = false
EOF
    if [ -n "$METRICS" ]; then
        # Agents of one machine cannot share [metrics]agent_port.
        AGENT_METRICS_PORTS[i]=$(free_port)
        printf '\n[metrics]\nagent_port = %s\n' "${AGENT_METRICS_PORTS[$i]}" \
            >>"$WORK/$host/agent.conf"
    fi
    if [ -n "$FAKE_ONLY" ]; then
        log "cyborg-agent $host: $drivers"
    else
        log "cyborg-agent $host: $drivers on a fake $scenario host"
    fi
    start "$host" "$VENV/bin/cyborg-agent" \
        --config-file "$WORK/cyborg.conf" --config-file "$WORK/$host/agent.conf"
done

wait_for "the devices of ${HOSTS[*]}" 180 "({d['hostname'] for d in r.get(
    '$API_URL/v2/devices', timeout=10,
    headers={'X-Roles': 'admin', 'X-Project-Id': 'demo'}).json()['devices']}
    >= set('${HOSTS[*]}'.split()))"

{
    echo "placement $PLACEMENT_URL"
    echo "api $API_URL"
    [ -z "$CONDUCTOR_METRICS_PORT" ] ||
        echo "conductor_metrics http://127.0.0.1:$CONDUCTOR_METRICS_PORT/metrics"
    for i in "${!AGENT_METRICS_PORTS[@]}"; do
        echo "agent_metrics ${HOSTS[$i]} http://127.0.0.1:${AGENT_METRICS_PORTS[$i]}/metrics"
    done
} >"$WORK/endpoints.tmp"
mv "$WORK/endpoints.tmp" "$WORK/endpoints"

echo
echo "\$ openstack accelerator device list --os-auth-type none" \
     "--os-endpoint $API_URL/v2"
"$VENV/bin/openstack" accelerator device list --os-auth-type none \
    --os-endpoint "$API_URL/v2"
echo

if [ -n "$WAIT" ]; then
    cat <<EOF
Running: Placement $PLACEMENT_URL, cyborg-api $API_URL, logs in $WORK/logs.
Try (with $VENV/bin on your PATH):
  openstack accelerator deployable list --os-auth-type none --os-endpoint $API_URL/v2
Ctrl-C stops everything and drops the databases and the vhost.
EOF
    while kill -0 "${PIDS[@]}" 2>/dev/null; do
        sleep 1
    done
    die "a process exited; see $WORK/logs"
fi
