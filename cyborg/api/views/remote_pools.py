from cyborg.api import views


def show(r, pool):
    return {'uuid': pool.uuid,
            'name': pool.name,
            'description': pool.description,
            'resource_class': pool.resource_class,
            'traits': pool.trait_list,
            'aggregates': pool.aggregate_list,
            'fabric_driver': pool.fabric_driver,
            'resource_provider_uuid': pool.rp_uuid,
            'state': pool.state,
            'placement_synced': pool.placement_synced,
            'handles': [{'uuid': h.uuid, 'fabric_address': h.fabric_address,
                         'in_use': h.in_use, 'hostname': h.hostname}
                        for h in pool.handles],
            'created_at': views.timestamp(pool.created_at),
            'updated_at': views.timestamp(pool.updated_at),
            'links': views.links(r, 'remote_pools', pool.uuid)}
