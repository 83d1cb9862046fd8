"""The inventory in other schedulers' formats: Kubernetes dynamic resource
allocation ``ResourceSlice`` objects (``resource_slices``) and Slurm's
``gres.conf`` (``gres_conf``).  Pure functions from the HostInventory
data of ``cyborg.objects.exports`` to documents; the API serves them at
microversion 2.9 (doc/source/exports.rst).  Both offer only units no
consumer holds (``free_units``)."""

import re

_NOT_LABEL = re.compile(r'[^a-z0-9-]+')


def dns_label(text, limit=63):
    """``text`` as an RFC 1123 label: lower case letters, digits and '-',
    starting and ending with an alphanumeric, at most ``limit``
    characters ('x' when nothing is left)."""
    label = _NOT_LABEL.sub('-', text.lower())[:limit].strip('-')
    return label or 'x'


def dns_subdomain(text, limit=253):
    """``text`` as an RFC 1123 subdomain: labels joined by dots."""
    labels = [dns_label(part) for part in text.lower().split('.') if part]
    return '.'.join(labels or ['x'])[:limit].strip('.-') or 'x'


def exported(deployable):
    """Whether a deployable is offered to other schedulers: schedulable
    here (not gone, its device enabled and healthy enough, not being
    programmed: ``cyborg.placement.provider_tree.blocked``)."""
    return deployable.schedulable


def units(deployable):
    """Every allocatable unit of a deployable, free or held: its attach
    handles, or, for a deployable without any (a MIG instance),
    ``num_accelerators`` units of its own (None stands for "the
    deployable itself")."""
    if deployable.handles:
        return list(deployable.handles)
    return [None] * max(deployable.num_accelerators, 0)


def held(unit):
    """Whether a consumer holds a unit of ``units()``: a handle bound to a
    Nova instance or allocated to a standalone consumer (a pod, a job)
    is cyborg's to give back, not another scheduler's to give again.  A
    deployable's own units (None) are never seen held: cyborg keeps no
    per-unit record of them."""
    return unit is not None and unit.in_use


def free_units(deployable):
    """The units of a deployable another scheduler may hand out."""
    return [unit for unit in units(deployable) if not held(unit)]
