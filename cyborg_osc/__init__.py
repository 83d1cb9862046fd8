"""cyborg's own ``openstack accelerator`` commands (python-openstackclient
plugins, entry point group ``openstack.accelerator.v2``).

A package of its own, beside ``cyborg``, so that the ``openstack`` command
loads only this and what python-openstackclient already has (osc-lib,
openstacksdk, keystoneauth): importing ``cyborg`` would start its service
machinery.  See doc/source/clients.rst.
"""
