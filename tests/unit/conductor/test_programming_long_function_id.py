"""An FPGA function id too long to name a Placement trait (255
characters at most, ``CUSTOM_FPGA_FUNCTION_ID_`` included): the
programming is refused before anything is downloaded or written.  It
used to program the card, then keep a trait that Placement refused at
every later sync of the host.  The real (embedded) Placement says where
the limit is."""

import datetime

import pytest
from oslo_utils import timeutils

from cyborg.common import exception
from cyborg.conductor import programming
from cyborg.db.api import deployables as deployable_db
from cyborg.objects import inventory
from tests.fixtures import arqs as seed
from tests.unit.conductor import test_programming as tp

pconf, ctx, glance, agent = tp.pconf, tp.ctx, tp.glance, tp.agent
device, placement_url = tp.device, tp.placement_url

LONGEST = inventory.MAX_TRAIT_LENGTH - len(inventory.FUNCTION_TRAIT_PREFIX)


def test_the_longest_function_id_placement_takes():
    assert len(inventory.function_trait('f' * LONGEST)) == 255
    assert len(inventory.function_trait('f' * (LONGEST + 1))) == 256


def _program(conf, ctx, device, glance, function_id):
    image = glance.add_image(b'long' * 10,
                             {'accel:function_id': function_id})
    target = deployable_db.program_target(ctx, device.deployable_uuid)
    return image, lambda: programming.program(
        conf, ctx, target, {'id': image, **glance.images[image]},
        timeutils.utcnow() + datetime.timedelta(minutes=1), own_handles=0)


def test_a_function_id_of_the_longest_trait_is_advertised(
        pconf, ctx, db, agent, device, glance):
    function_id = 'f' * LONGEST
    image, program = _program(pconf, ctx, device, glance, function_id)
    assert program()
    assert tp._bitstream(ctx, device) == image
    assert tp._provider(pconf, device.rp_uuid) == (
        0, {tp.FAKE_TRAIT, inventory.function_trait(function_id)})


def test_an_admin_programming_of_a_too_long_function_id_is_refused(
        pconf, ctx, db, agent, device, glance):
    image, program = _program(pconf, ctx, device, glance,
                              'f' * (LONGEST + 1))
    with pytest.raises(exception.Invalid,
                       match='too long to name a Placement trait'):
        program()
    assert glance.downloads() == []
    assert tp._loaded(agent) is None
    assert tp._bitstream(ctx, device) is None
    assert deployable_db.program_target(
        ctx, device.deployable_uuid).programming_until is None
    # The host's syncs go on as before: the old trait is advertised.
    assert tp._provider(pconf, device.rp_uuid) == (0, {tp.FAKE_TRAIT,
                                                       tp.OLD_TRAIT})


def test_a_bind_asking_for_a_too_long_function_id_fails_saying_why(
        pconf, ctx, db, agent, device, glance):
    function_id = 'g' * (LONGEST + 1)
    glance.add_image(b'long' * 10, {'accel:function_id': function_id})
    # Refused at once: the PATCH (400, nothing written).
    with pytest.raises(exception.BindFailed,
                       match='too long to name a Placement trait'):
        tp._bind(pconf, ctx, db, device, {'accel:function_id': function_id})
    assert glance.downloads() == []
    assert tp._loaded(agent) is None
    assert seed.handles_in_use(db) == 0
