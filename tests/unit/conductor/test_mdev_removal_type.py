"""The conductor's mdev removal names the handle's mdev type (agent RPC
1.2), so that the agent refuses a uuid of an mdev of another type; capped
at 1.1 ([upgrade_levels]agent = 2027.1), or refused by an older agent, it
is sent as 2027.1 agents take it.  The real clients, transport (fake://)
and, where an agent removes, the real agent endpoint on a fake sysfs
tree."""

import json
import os
import uuid as uuidlib

import oslo_messaging as messaging
import pytest

from cyborg.common import context as cyborg_context
from cyborg.conductor import arq_binding
from tests.fixtures import arqs as seed
from tests.fixtures import privsep as fake_privsep
from tests.unit.conductor import agent_endpoint
from tests.unit.conductor import test_arq_vgpu as vgpu

HOST, GPU, VGPU_TYPE = vgpu.HOST, vgpu.GPU, vgpu.VGPU_TYPE
OTHER_TYPE = 'nvidia-224'
fake_nova, placement_url = vgpu.fake_nova, vgpu.placement_url
tree, vconf = vgpu.tree, vgpu.vconf
ATTACH_INFO = json.dumps({'bus': '0c', 'device': '00', 'domain': '0000',
                          'function': '0', 'asked_type': VGPU_TYPE})


class _Remover:
    """An agent serving ``version`` that records its removals."""

    def __init__(self, version):
        self.target = messaging.Target(version=version)
        self.removals = []

    def remove_vgpu_mdev(self, context, **kwargs):
        self.removals.append(kwargs)
        return True


def _removed(tree, mdev):
    with open(os.path.join(tree.root, 'bus', 'mdev', 'devices', mdev,
                           'remove')) as f:
        return f.read() == '1'


@pytest.fixture
def ctx():
    return cyborg_context.get_admin_context()


@pytest.mark.parametrize('cap, version, sent', [
    ('', '1.2', {'asked_type': VGPU_TYPE}),
    # No cap set while a 2027.1 agent runs: it refuses 1.2 (nothing
    # removed), and the removal is sent again as it takes it.
    ('', '1.1', {}),
    ('1.1', '1.1', {}),
    ('2027.1', '1.1', {}),
    ('2027.1', '1.2', {})])
def test_the_removal_names_the_type_to_agents_that_take_it(
        conf, ctx, cap, version, sent):
    conf.set_override('agent', cap, group='upgrade_levels')
    agent = _Remover(version)
    mdev = str(uuidlib.uuid4())
    with agent_endpoint.serving(conf, HOST, agent):
        assert arq_binding._remove_mdev(conf, ctx, HOST, ATTACH_INFO,
                                        mdev) is None
    assert agent.removals == [dict(
        {'pci_address': GPU, 'mdev_uuid': mdev}, **sent)]


def test_an_mdev_of_another_type_is_left_alone(vconf, ctx, tree):
    tree.add_mdev_type(GPU, OTHER_TYPE, 'GRID T4-8C', 2)
    mdev = str(uuidlib.uuid4())
    tree.add_mdev(GPU, mdev, OTHER_TYPE)
    with fake_privsep.in_process(vconf), seed.agent_endpoint(vconf, HOST):
        reason = arq_binding._remove_mdev(vconf, ctx, HOST, ATTACH_INFO,
                                          mdev)
    assert f'could not remove mdev {mdev}' in reason
    assert not _removed(tree, mdev)


def test_capped_the_agent_checks_the_parent_only(vconf, ctx, tree):
    vconf.set_override('agent', '2027.1', group='upgrade_levels')
    tree.add_mdev_type(GPU, OTHER_TYPE, 'GRID T4-8C', 2)
    mdev = str(uuidlib.uuid4())
    tree.add_mdev(GPU, mdev, OTHER_TYPE)
    with fake_privsep.in_process(vconf), seed.agent_endpoint(vconf, HOST):
        assert arq_binding._remove_mdev(vconf, ctx, HOST, ATTACH_INFO,
                                        mdev) is None
    assert _removed(tree, mdev)
