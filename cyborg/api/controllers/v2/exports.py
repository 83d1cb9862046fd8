"""Exports of the inventory for other schedulers (microversion 2.9):
GET /v2/exports/resourceslices and GET /v2/exports/gres.conf."""

import yaml

from cyborg.api.controllers import base
from cyborg.exports import gres_conf
from cyborg.exports import resource_slices
from cyborg.objects import exports


class _QuotedDumper(yaml.SafeDumper):
    """YAML with every string double-quoted: kubectl's YAML reader
    resolves plain scalars by YAML 1.1 rules, so a model "1e30" (a PCI
    device id) would reach the API server as a float and "y" as a
    boolean, and the apply be refused."""


_YAML = 'application/yaml'
# JSON first: it wins a tie (Accept: */*).
_MEDIA_TYPES = ('application/json', _YAML)


def _quoted(dumper, text):
    return dumper.represent_scalar('tag:yaml.org,2002:str', text,
                                   style='"')


_QuotedDumper.add_representer(str, _quoted)


def _inventories(r):
    return exports.host_inventories(r.context, r.query.get('hostname') or
                                    None)


def _wants_yaml(r):
    """?format says; else the Accept header's first choice of the two
    (a tie, no header or neither acceptable: JSON, as before)."""
    chosen = r.query.get('format')
    if chosen:
        return chosen == 'yaml'
    offers = r.req.accept.acceptable_offers(_MEDIA_TYPES)
    return bool(offers) and offers[0][0] == _YAML


def export_resource_slices(r):
    """Kubernetes ResourceSlices (resource.k8s.io/v1) of one host or all.

    A Kubernetes List of ResourceSlice objects, one pool per host and
    driver (a pool with nothing to offer: one slice of no devices), each
    labelled to be pruned by; as YAML, every string double-quoted, for
    ?format=yaml or, without ``format``, an Accept header preferring
    application/yaml to application/json.
    """
    document = resource_slices.document(
        (inventory, inventory.generation) for inventory in _inventories(r))
    if _wants_yaml(r):
        # No line width: a long string is never folded over lines.
        return base.Text(_YAML, yaml.dump(
            document, Dumper=_QuotedDumper, default_flow_style=False,
            sort_keys=False, allow_unicode=True, width=2 ** 31))
    return document


def export_gres_conf(r):
    """Slurm gres.conf lines of one host or all, as text/plain."""
    return base.Text('text/plain',
                     gres_conf.document(_inventories(r)))
