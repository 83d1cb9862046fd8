#!/bin/bash
# The variables are devstack's, read by the plugin:
# shellcheck disable=SC2034
# Just enough of devstack to run the cyborg plugin's phases in a
# temporary directory: iniset writes real ini files; the functions that
# would reach Keystone, Apache, systemd or a database server record their
# arguments in $CALLS, one call per line.  Needs TEST_ROOT, PYTHON, CALLS;
# ENABLED_SERVICES (default: a controller's keystone and mysql; settings
# adds cyborg's) and DISABLED_SERVICES may be set, as in local.conf, and
# TEST_STACK_USER (default: the user running the test; another user only
# means something to a test run as root, where sudo changes owners).

set -eu

DEST=$TEST_ROOT/opt
DATA_DIR=$TEST_ROOT/data
STACK_USER=${TEST_STACK_USER:-$(id -un)}
SERVICE_PROTOCOL=http
SERVICE_HOST=192.0.2.10
SERVICE_PASSWORD=secret
SERVICE_PROJECT_NAME=service
SERVICE_DOMAIN_NAME=Default
SERVICE_TIMEOUT=60
REGION_NAME=RegionOne
KEYSTONE_SERVICE_URI=http://192.0.2.10/identity
ENABLE_DEBUG_LOG_LEVEL=True
NOVA_CONF=$TEST_ROOT/etc/nova/nova.conf
NOVA_CPU_CONF=$TEST_ROOT/etc/nova/nova-cpu.conf
CYBORG_CONF_DIR=$TEST_ROOT/etc/cyborg
ENABLED_SERVICES=${ENABLED_SERVICES-keystone,mysql}
DISABLED_SERVICES=${DISABLED_SERVICES-}
DATABASE_BACKENDS="mysql postgresql"

function record { printf '%s\n' "$*" >> "$CALLS"; }

# devstack's iniset [-sudo] FILE SECTION OPTION VALUE, for real.
function iniset {
    [[ "$1" == "-sudo" ]] && shift
    mkdir -p "$(dirname "$1")"
    "$PYTHON" - "$@" <<'PY'
import configparser, os, sys
path, section, option, value = sys.argv[1:5]
parser = configparser.RawConfigParser()
parser.optionxform = str
if os.path.exists(path):
    parser.read(path)
if section != 'DEFAULT' and not parser.has_section(section):
    parser.add_section(section)
parser.set(section, option, value)
with open(path, 'w') as f:
    parser.write(f)
PY
}

function iniset_rpc_backend {
    iniset "$2" "$3" transport_url "rabbit://stackrabbit:secret@192.0.2.10:5672/"
}
function database_connection_url { echo "sqlite:///$TEST_ROOT/data/$1.sqlite"; }
function recreate_database { record recreate_database "$@"; rm -f "$TEST_ROOT/data/$1.sqlite"; }
function configure_keystone_authtoken_middleware {
    iniset "$1" keystone_authtoken auth_type password
    iniset "$1" keystone_authtoken www_authenticate_uri "$KEYSTONE_SERVICE_URI"
    iniset "$1" keystone_authtoken auth_url "$KEYSTONE_SERVICE_URI"
    iniset "$1" keystone_authtoken username "$2"
}
function write_uwsgi_config {
    iniset "$1" uwsgi module "$2"
    iniset "$1" uwsgi processes 2
    record write_uwsgi_config "$@"
}
function remove_uwsgi_config { record remove_uwsgi_config "$@"; rm -f "$1"; }
function setup_develop { record setup_develop "$@"; }
function get_python_exec_prefix { dirname "$PYTHON"; }
# devstack's: true when any of the services is in ENABLED_SERVICES.
function is_service_enabled {
    local service
    for service in "$@"; do
        [[ ,$ENABLED_SERVICES, == *,$service,* ]] && return 0
    done
    return 1
}
function echo_summary { :; }
# devstack's run_process starts only an enabled service.
function run_process {
    if is_service_enabled "$1"; then
        record run_process "$@"
    fi
}
function stop_process { record stop_process "$@"; }
function wait_for_service { record wait_for_service "$@"; }
function die { echo "die: $*" >&2; exit 1; }
function create_service_user { record create_service_user "$@"; }
function get_or_create_role { record get_or_create_role "$@"; }
function get_or_add_user_project_role { record get_or_add_user_project_role "$@"; }
function get_or_create_service { record get_or_create_service "$@"; echo 5e7f1c2a; }
function get_or_create_endpoint { record get_or_create_endpoint "$@"; }
# devstack's: adds those not enabled yet, except the disabled ones.
function enable_service {
    local service
    for service in "$@"; do
        [[ ,$DISABLED_SERVICES, == *,$service,* ]] && continue
        is_service_enabled "$service" ||
            ENABLED_SERVICES=${ENABLED_SERVICES:+$ENABLED_SERVICES,}$service
    done
}
# Recorded; install -d -o USER makes the directories (the stack user's
# only when the test runs as root), chown changes owners only when the
# test runs as root, anything else runs.
function sudo {
    record sudo "$@"
    if [[ "$1" == "install" && $(id -u) != 0 ]]; then
        shift 3
        mkdir -p "$@"
    elif [[ "$1" != "chown" || $(id -u) == 0 ]]; then
        "$@"
    fi
}
