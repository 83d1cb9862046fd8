"""Conductor RPC endpoints: thin, each delegating to the module that owns
the work.  The conductor is the only writer of the database and the only
client of Placement (doc/source/architecture.rst, "The conductor owns
every write").

Owners:
  report_inventory            inventory_apply (plan -> transaction -> sync)
  report_health               health (state machine -> transaction -> sync)
  device_set_status           device_status
  device_profile_*            device_profiles
  attribute_*                 attributes
  arq_allocate                arq_allocation (standalone, no Nova)
  arq_*                       arq_binding (quotas: quotas)
  deployable_program          programming
  remote_pool_*               remote_pools
  host_list, host_forget      hosts (cyborg-manage host)
  bound_mdevs                 read here (an agent's start)
"""

import functools
import json

from oslo_db import exception as db_exc
from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg.common import exception
from cyborg.common import timing
from cyborg.conductor import arq_allocation
from cyborg.conductor import arq_binding
from cyborg.conductor import attributes
from cyborg.conductor import awaited
from cyborg.conductor import device_profiles
from cyborg.conductor import device_status
from cyborg.conductor import health
from cyborg.conductor import hosts
from cyborg.conductor import inventory_apply
from cyborg.conductor import programming
from cyborg.conductor import remote_pools
from cyborg.conductor import rpcapi
from cyborg.db import api as db_api
from cyborg.db.api import attach_handles as handle_db
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)


def _answer(func):
    """Send a 4xx CyborgException back as an answer, not a conductor fault:
    the dispatcher logs no traceback for it.  An expected outage (the
    database or Placement unreachable: a 503) is answered the same way
    after one WARNING line.  Anything else (a bug) is logged with its
    traceback where it happened."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            try:
                awaited.check(
                    args[1] if len(args) > 1 else kwargs.get('context'),
                    func.__name__)
                with timing.rpc_served(func.__name__):
                    return func(*args, **kwargs)
            except exception.CyborgException:
                raise
            except Exception as exc:
                answer = _as_answer(exc)
                if answer is exc:
                    raise
                raise answer from exc
        except exception.CyborgException as exc:
            if _outage(exc):
                LOG.warning('%s: %s', func.__name__, exc)
            elif exc.code >= 500:
                raise
            raise messaging.ExpectedException()
    return wrapper


def _as_answer(exc):
    """What a database error in an RPC method answers: a 503 saying the
    schema is missing or the database unreachable, or, for a write outside
    write_retrying that waited too long for a row lock, what one inside
    it answers (``stayed_locked``); else ``exc`` itself (a bug)."""
    if exception.db_not_ready(exc):
        return exception.ServiceUnavailable(
            reason=exception.DB_NOT_READY_REASON)
    if isinstance(exc, exception.DB_OUTAGES):
        return (db_api.stayed_locked(exc) or exception.ServiceUnavailable(
            reason='the database is unreachable'))
    if isinstance(exc, db_exc.DBError):
        return db_api.stayed_locked(exc) or exc
    return exc


def _outage(exc):
    """Whether a CyborgException says a service is away (the 503s of the
    database, of Placement unreachable or failing), not a bug: Placement
    refusing what we asked (a 4xx of its own) is one of ours."""
    if isinstance(exc, exception.ServiceUnavailable):
        return True
    return (isinstance(exc, exception.PlacementError)
            and getattr(exc, 'status_code', 503) >= 500)


class ConductorManager:
    """Endpoint object served on topic ``cyborg-conductor``."""

    target = messaging.Target(version=rpcapi.RPC_API_VERSION)

    def __init__(self, conf, host):
        self.conf = conf
        self.host = host

    @_answer
    def report_inventory(self, context, hostname, report):
        return inventory_apply.handle_report(self.conf, context, hostname,
                                             report)

    @_answer
    def report_health(self, context, hostname, report):
        return health.handle_report(self.conf, context, hostname, report)

    @_answer
    def device_set_status(self, context, device_uuid, status, wait=None):
        return device_status.set_status(self.conf, context, device_uuid,
                                        status, wait=wait)

    @_answer
    def device_profile_create(self, context, values):
        return device_profiles.create(context, values)

    @_answer
    def device_profile_delete(self, context, uuids):
        return device_profiles.delete(context, uuids)

    @_answer
    def attribute_create(self, context, deployable_uuid, key, value):
        return attributes.create(self.conf, context, deployable_uuid, key,
                                 value)

    @_answer
    def attribute_delete(self, context, attribute_uuid):
        return attributes.delete(self.conf, context, attribute_uuid)

    @_answer
    def arq_create(self, context, device_profile_uuid, project_id,
                   device_profile_name=None, visible_to=None):
        return arq_binding.create(context, device_profile_uuid, project_id,
                                  conf=self.conf,
                                  device_profile_name=device_profile_name,
                                  visible_to=visible_to)

    @_answer
    def arq_bind(self, context, bindings):
        return arq_binding.bind(self.conf, context, bindings)

    @_answer
    def arq_allocate(self, context, arq_uuid, consumer_id, consumer_type,
                     hostname=None):
        return arq_allocation.allocate(self.conf, context, arq_uuid,
                                       consumer_id, consumer_type, hostname)

    @_answer
    def arq_unbind(self, context, arq_uuids):
        return arq_binding.unbind(self.conf, context, arq_uuids)

    @_answer
    def arq_delete(self, context, arq_uuids=None, instance_uuid=None,
                   guard_holding=False):
        return arq_binding.delete(self.conf, context, arq_uuids=arq_uuids,
                                  instance_uuid=instance_uuid,
                                  guard_holding=guard_holding)

    @_answer
    def deployable_program(self, context, deployable_uuid, image_uuid):
        return programming.program_deployable(self.conf, context,
                                              deployable_uuid, image_uuid)

    @_answer
    def host_list(self, context):
        return hosts.list_hosts(self.conf, context)

    @_answer
    def host_forget(self, context, hostname):
        return hosts.forget(self.conf, context, hostname)

    @_answer
    def bound_mdevs(self, context, hostname):
        """The mdevs of the Bound ARQs on ``hostname``'s devices, for its
        agent to recreate at start (mdevs do not survive a reboot):
        [{arq_uuid, mdev_uuid, pci_address, mdev_type}]."""
        found = []
        for row in handle_db.bound_mdevs(context, hostname):
            info = json.loads(row.attach_info)
            found.append({'arq_uuid': row.arq_uuid, 'mdev_uuid': row.uuid,
                          'pci_address': inventory.pci_address(info),
                          'mdev_type': info.get('asked_type')})
        return found

    @_answer
    def remote_pool_create(self, context, values):
        return remote_pools.create(self.conf, context, values)

    @_answer
    def remote_pool_delete(self, context, pool_uuid):
        return remote_pools.delete(self.conf, context, pool_uuid)
