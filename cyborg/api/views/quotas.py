from cyborg.common import quota


def show(project_id, limits, used):
    """A project's quota: each resource Keystone limits, the strategy
    limits to 0 by name (``[quota]unified_limits_resource_list`` under
    ``require``), or the project uses, with its limit (-1 for none) and
    its usage."""
    names = (limits.names() | limits.required_by_name() |
             {name for name, value in used.items() if value} |
             {quota.ARQS})
    resources = {}
    for name in sorted(names):
        limit = limits.limit(name)
        resources[name] = {
            'limit': quota.UNLIMITED if limit is None else limit,
            'in_use': used.get(name, 0)}
    return {'quota': {'project_id': project_id, 'enforced': limits.enforced,
                      'resources': resources}}
