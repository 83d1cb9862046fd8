"""Conductor RPC endpoints: thin, each delegating to the module that owns
the work.  The conductor is the only writer of the database and the only
client of Placement (see DESIGN.md).

Owners:
  report_inventory            inventory_apply (plan -> transaction -> sync)
  device_set_status           device_status
  device_profile_*            device_profiles
  attribute_*                 attributes
  arq_*                       arq_binding
  deployable_program          programming
"""

import oslo_messaging as messaging

from cyborg.conductor import rpcapi


class ConductorManager:
    """Endpoint object served on topic ``cyborg-conductor``."""

    target = messaging.Target(version=rpcapi.RPC_API_VERSION)

    def __init__(self, conf, host):
        self.conf = conf
        self.host = host

    def report_inventory(self, context, hostname, report):
        from cyborg.conductor import inventory_apply
        return inventory_apply.handle_report(self.conf, context, hostname,
                                             report)

    def device_set_status(self, context, device_uuid, status):
        from cyborg.conductor import device_status
        return device_status.set_status(self.conf, context, device_uuid,
                                        status)

    def device_profile_create(self, context, values):
        from cyborg.conductor import device_profiles
        return device_profiles.create(context, values)

    def device_profile_delete(self, context, uuids):
        from cyborg.conductor import device_profiles
        return device_profiles.delete(context, uuids)

    def attribute_create(self, context, deployable_uuid, key, value):
        from cyborg.conductor import attributes
        return attributes.create(self.conf, context, deployable_uuid, key,
                                 value)

    def attribute_delete(self, context, attribute_uuid):
        from cyborg.conductor import attributes
        return attributes.delete(self.conf, context, attribute_uuid)

    def arq_create(self, context, device_profile_uuid, project_id):
        from cyborg.conductor import arq_binding
        return arq_binding.create(context, device_profile_uuid, project_id)

    def arq_bind(self, context, bindings):
        from cyborg.conductor import arq_binding
        return arq_binding.bind(self.conf, context, bindings)

    def arq_unbind(self, context, arq_uuids):
        from cyborg.conductor import arq_binding
        return arq_binding.unbind(self.conf, context, arq_uuids)

    def arq_delete(self, context, arq_uuids=None, instance_uuid=None):
        from cyborg.conductor import arq_binding
        return arq_binding.delete(self.conf, context, arq_uuids=arq_uuids,
                                  instance_uuid=instance_uuid)

    def deployable_program(self, context, deployable_uuid, image_uuid):
        from cyborg.conductor import programming
        return programming.program_deployable(self.conf, context,
                                              deployable_uuid, image_uuid)
