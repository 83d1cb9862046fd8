#!/bin/bash
# devstack plugin for cyborg: installs it, writes /etc/cyborg/cyborg.conf,
# creates and migrates the database, registers the accelerator endpoint
# (<host>/accelerator/v2, the API under uWSGI behind Apache, as upstream
# Cyborg), sets Nova's service token options and runs cyborg-api,
# cyborg-conductor and cyborg-agent.
#
# local.conf:  enable_plugin cyborg <url of this repository> [branch]

XTRACE=$(set +o | grep xtrace)
set -o xtrace

# shellcheck source=devstack/lib/cyborg
source "$(dirname "${BASH_SOURCE[0]}")/lib/cyborg"

CYBORG_BIN_DIR=$(get_python_exec_prefix)

if is_service_enabled cyborg-api cyborg-cond cyborg-agent; then
    if [[ "$1" == "stack" && "$2" == "install" ]]; then
        echo_summary "Installing cyborg"
        install_cyborg
    elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
        echo_summary "Configuring cyborg"
        configure_cyborg
        if is_service_enabled keystone; then
            create_cyborg_accounts
        fi
    elif [[ "$1" == "stack" && "$2" == "extra" ]]; then
        echo_summary "Initializing and starting cyborg"
        protect_cyborg_config
        # The database belongs to the node with the conductor and the
        # database server (devstack's DATABASE_BACKENDS, mysql or
        # postgresql): a compute node's DATABASE_HOST is the controller,
        # whose database init_cyborg would drop and recreate.
        # shellcheck disable=SC2086
        if is_service_enabled cyborg-cond &&
                is_service_enabled $DATABASE_BACKENDS; then
            init_cyborg
        fi
        start_cyborg
    fi

    if [[ "$1" == "unstack" ]]; then
        stop_cyborg
    fi

    if [[ "$1" == "clean" ]]; then
        cleanup_cyborg
    fi
fi

$XTRACE
