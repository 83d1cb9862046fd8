"""Fabric drivers: attach remote (fabric-attached) accelerators to hosts.

A remote pool (cyborg.conductor.remote_pools) names its driver; the
conductor loads it by that name from the ``cyborg.fabric.driver`` entry
points (``loader.get``) when it binds or releases one of the pool's
handles.  Only the conductor imports this package.
"""
