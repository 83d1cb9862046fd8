"""Exports of the inventory for other schedulers (microversion 2.9):
GET /v2/exports/resourceslices and GET /v2/exports/gres.conf."""

import yaml

from cyborg.api.controllers import base
from cyborg.exports import gres_conf
from cyborg.exports import resource_slices
from cyborg.objects import exports


def _inventories(r):
    return exports.host_inventories(r.context, r.query.get('hostname') or
                                    None)


def export_resource_slices(r):
    """Kubernetes ResourceSlices (resource.k8s.io/v1) of one host or all.

    A Kubernetes List of ResourceSlice objects, one pool per host and
    driver; ?format=yaml answers the same document as YAML.
    """
    document = resource_slices.document(
        (inventory, inventory.generation) for inventory in _inventories(r))
    if r.query.get('format') == 'yaml':
        return base.Text('application/yaml', yaml.safe_dump(
            document, default_flow_style=False, sort_keys=False))
    return document


def export_gres_conf(r):
    """Slurm gres.conf lines of one host or all, as text/plain."""
    return base.Text('text/plain',
                     gres_conf.document(_inventories(r)))
