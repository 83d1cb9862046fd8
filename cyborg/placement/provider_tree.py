"""The provider tree Placement should hold for a host, computed from rows.

One provider per deployable, nested under the host's compute node provider
(doc/source/contract.rst, "Placement"): named after the deployable, uuid
``inventory.provider_uuid(name)`` (so providers OpenStack Cyborg made are
adopted), inventory ``{rc: {total: n, max_unit: n, reserved: r}}`` from the
``rc`` attribute and ``num_accelerators``, traits from the ``trait*``
attributes plus ``OWNER_CYBORG``.

``reserved`` is the whole total while the device is in maintenance, the
deployable is gone (hardware vanished under an allocation), its card is
being programmed (``programming_until`` set on it or on any other
deployable of its card: a card with VFs is rewritten whole, whichever of
them asked) or its effective health is out of the schedule
(``states.OUT_OF_SCHEDULE``), so nothing new lands on it; 0 otherwise.
An out-of-schedule provider also carries ``states.UNHEALTHY_TRAIT`` so
operators and request filters can see it.
Allocations already held are never touched: a resource class the rows no
longer name but allocations still hold (another kind of card in the slot)
is kept, reserved whole, until they end (``bridged``).  Pure functions: no
database, no HTTP.
"""

import dataclasses

from cyborg.common import states
from cyborg.objects import inventory

OWNER_TRAIT = 'OWNER_CYBORG'

# The inventory fields we set and compare; Placement fills in the rest.
INVENTORY_FIELDS = ('total', 'reserved', 'min_unit', 'max_unit',
                    'step_size', 'allocation_ratio')


@dataclasses.dataclass(frozen=True)
class Provider:
    uuid: str
    name: str
    parent_uuid: str
    inventories: dict          # {rc: {field: value}} for INVENTORY_FIELDS
    traits: frozenset


def blocked(device_status, health, gone=False, programming_until=None):
    """Whether nothing new may land on a deployable: its device is in
    maintenance, its effective ``health`` is out of the schedule, it is
    gone, or it is being programmed (``programming_until`` set: for
    Placement, the mark of any deployable of its card, ``provider_for``).
    Placement reserves such a deployable whole (``provider_for``) and the
    exports offer none of its units (cyborg.objects.exports): one rule,
    so that Kubernetes and Slurm are not handed what Nova cannot have."""
    return (device_status == states.MAINTAINING or
            health in states.OUT_OF_SCHEDULE or bool(gone) or
            programming_until is not None)


def provider_for(deployable, attributes, device_status, parent_uuid,
                 health=states.HEALTHY):
    """The provider of one deployable.

    ``deployable``: a mapping with name, num_accelerators, gone and
    optionally rp_uuid, programming_until and card_programming_until (the
    mark of any deployable of its card, as ``inventory.host_providers``
    reads it: the card is reserved whole, every provider of it, while
    one of them is marked); ``attributes``: {key: value} of that
    deployable; ``health``: its effective health (the worse of its own
    and its device's).
    """
    name = deployable['name']
    total = int(deployable['num_accelerators'])
    unhealthy = health in states.OUT_OF_SCHEDULE
    reserved = blocked(device_status, health, deployable.get('gone'),
                       deployable.get('programming_until') or
                       deployable.get('card_programming_until'))
    inventories = {}
    rc = attributes.get(inventory.RC_ATTRIBUTE)
    if rc and total > 0:
        inventories[rc] = {'total': total,
                           'reserved': total if reserved else 0,
                           'min_unit': 1, 'max_unit': total, 'step_size': 1,
                           'allocation_ratio': 1.0}
    traits = {v for k, v in attributes.items()
              if k.startswith(inventory.TRAIT_ATTRIBUTE_PREFIX)}
    traits.add(OWNER_TRAIT)
    if unhealthy:
        traits.add(states.UNHEALTHY_TRAIT)
    return Provider(uuid=deployable.get('rp_uuid') or
                    inventory.provider_uuid(name),
                    name=name, parent_uuid=parent_uuid,
                    inventories=inventories, traits=frozenset(traits))


def custom_names(providers):
    """(custom resource classes, custom traits) the providers need."""
    rcs = {rc for p in providers for rc in p.inventories
           if rc.startswith('CUSTOM_')}
    traits = {t for p in providers for t in p.traits
              if t.startswith('CUSTOM_')}
    return rcs, traits


def inventories_differ(desired, actual):
    """Whether Placement's ``actual`` inventories differ from ours."""
    if set(desired) != set(actual):
        return True
    return any(float(actual[rc].get(field, 0)) != float(values[field])
               for rc, values in desired.items()
               for field in INVENTORY_FIELDS)


def bridged(desired, actual, held):
    """The inventories to write instead of ``desired`` when Placement
    refuses it because allocations hold resource classes of ``actual``
    (the provider's inventories now) that ``desired`` drops: the card in
    the slot was replaced by one of another kind (or its driver names its
    class otherwise) while an instance still holds the old class.
    ``held``: the classes the provider's allocations hold.

    Those classes are kept as Placement has them but reserved whole, so
    that nothing new is scheduled on what the slot no longer holds, and
    the allocations are never touched; ``desired``'s classes are reserved
    whole too until they end: the deployable's attach handles are the
    slot's functions, which the instance's accelerator request may still
    hold.  ``desired`` itself when no dropped class is held (the
    allocations ended meanwhile)."""
    kept = {rc: _whole(inv) for rc, inv in actual.items()
            if rc in held and rc not in desired}
    if not kept:
        return desired
    return dict({rc: _whole(inv) for rc, inv in desired.items()}, **kept)


def _whole(values):
    """One class's inventory (our fields of it) reserved whole."""
    fields = {f: values[f] for f in INVENTORY_FIELDS if f in values}
    return dict(fields, reserved=fields['total'])
