#!/bin/bash
# devstack plugin for cyborg: installs it, writes /etc/cyborg/cyborg.conf,
# creates and migrates the database, registers the accelerator endpoint
# (mounted under /accelerator like upstream Cyborg) and runs cyborg-api,
# cyborg-conductor and cyborg-agent.
#
# local.conf:  enable_plugin cyborg <url of this repository> [branch]

XTRACE=$(set +o | grep xtrace)
set -o xtrace

function install_cyborg {
    setup_develop $CYBORG_DIR
}

function configure_cyborg {
    sudo install -d -o $STACK_USER $CYBORG_CONF_DIR $CYBORG_STATE_PATH
    rm -f $CYBORG_CONF_FILE

    iniset $CYBORG_CONF_FILE DEFAULT debug $ENABLE_DEBUG_LOG_LEVEL
    iniset $CYBORG_CONF_FILE DEFAULT host $(hostname)
    iniset $CYBORG_CONF_FILE DEFAULT state_path $CYBORG_STATE_PATH
    iniset_rpc_backend cyborg $CYBORG_CONF_FILE DEFAULT
    iniset $CYBORG_CONF_FILE database connection \
        $(database_connection_url cyborg)

    iniset $CYBORG_CONF_FILE api host_ip $CYBORG_SERVICE_HOST
    iniset $CYBORG_CONF_FILE api port $CYBORG_SERVICE_PORT
    iniset $CYBORG_CONF_FILE api api_workers $CYBORG_API_WORKERS
    iniset $CYBORG_CONF_FILE api auth_strategy keystone
    iniset $CYBORG_CONF_FILE api public_endpoint \
        "$CYBORG_SERVICE_PROTOCOL://$CYBORG_SERVICE_HOST/accelerator"
    configure_keystone_authtoken_middleware $CYBORG_CONF_FILE cyborg

    iniset $CYBORG_CONF_FILE agent enabled_drivers $CYBORG_ENABLED_DRIVERS
    # The compute node provider is Nova's, named after the hypervisor host.
    iniset $CYBORG_CONF_FILE agent resource_provider_name $(hostname)

    local group
    for group in placement nova glance service_user; do
        configure_keystoneauth_section $group
    done
    iniset $CYBORG_CONF_FILE service_user send_service_user_token True
}

function configure_keystoneauth_section {
    local group=$1
    iniset $CYBORG_CONF_FILE $group auth_type password
    iniset $CYBORG_CONF_FILE $group auth_url $KEYSTONE_SERVICE_URI
    iniset $CYBORG_CONF_FILE $group username cyborg
    iniset $CYBORG_CONF_FILE $group password $SERVICE_PASSWORD
    iniset $CYBORG_CONF_FILE $group project_name $SERVICE_PROJECT_NAME
    iniset $CYBORG_CONF_FILE $group user_domain_name $SERVICE_DOMAIN_NAME
    iniset $CYBORG_CONF_FILE $group project_domain_name $SERVICE_DOMAIN_NAME
    iniset $CYBORG_CONF_FILE $group region_name $REGION_NAME
}

function create_cyborg_accounts {
    create_service_user cyborg admin
    get_or_create_service accelerator accelerator "Accelerator management"
    get_or_create_endpoint accelerator $REGION_NAME \
        "$CYBORG_SERVICE_PROTOCOL://$CYBORG_SERVICE_HOST/accelerator/v2"
}

function init_cyborg {
    recreate_database cyborg
    $CYBORG_BIN_DIR/cyborg-dbsync --config-file $CYBORG_CONF_FILE upgrade
}

function start_cyborg {
    # Apache proxies /accelerator to cyborg-api, as devstack mounts it.
    local proxy_conf
    proxy_conf=$(apache_site_config_for cyborg-api)
    sudo tee $proxy_conf >/dev/null <<EOC
ProxyPass "/accelerator" "http://$CYBORG_SERVICE_HOST:$CYBORG_SERVICE_PORT" retry=0
ProxyPassReverse "/accelerator" "http://$CYBORG_SERVICE_HOST:$CYBORG_SERVICE_PORT"
EOC
    enable_apache_mod proxy
    enable_apache_mod proxy_http
    enable_apache_site cyborg-api
    restart_apache_server

    run_process cyborg-api "$CYBORG_BIN_DIR/cyborg-api --config-file $CYBORG_CONF_FILE"
    run_process cyborg-cond "$CYBORG_BIN_DIR/cyborg-conductor --config-file $CYBORG_CONF_FILE"
    run_process cyborg-agent "$CYBORG_BIN_DIR/cyborg-agent --config-file $CYBORG_CONF_FILE"
}

function stop_cyborg {
    local service
    for service in cyborg-api cyborg-cond cyborg-agent; do
        stop_process $service
    done
}

function cleanup_cyborg {
    disable_apache_site cyborg-api
    sudo rm -f $(apache_site_config_for cyborg-api)
    sudo rm -rf $CYBORG_STATE_PATH
}

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
        init_cyborg
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
