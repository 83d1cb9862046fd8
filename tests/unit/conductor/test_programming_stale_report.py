"""An inventory report the agent read before a programming ended, stored
after the programming recorded the new image, put the old image back
until the agent's next report: a bind asking for the new image then
loaded it again, and one asking for the old one took a card that no
longer ran it.  The image a programming records wins over the report in
flight; the agent's next report, read after it, says again what the
card runs.

The fake FPGA of HOST as a real agent reports it (its driver records the
image it programs), the conductor's report endpoint in this process,
the real (embedded) Placement."""

import uuid as uuidlib

import sqlalchemy as sa

from cyborg.conductor import manager
from cyborg.conductor import programming
from cyborg.db import models
from cyborg.drivers import fake
from tests.fixtures import arqs as seed
from tests.unit.conductor import test_programming as tp

pconf, ctx, glance = tp.pconf, tp.ctx, tp.glance
placement_url = tp.placement_url

HOST = tp.HOST


class _OnItsWay:
    """The conductor's report endpoint, reached once ``meanwhile()``
    (when set) has run: what happens while a report the agent has read
    is on its way."""

    def __init__(self, conf):
        self.conductor = manager.ConductorManager(conf, 'c1')
        self.meanwhile = None

    def report_inventory(self, context, hostname, report):
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            meanwhile()
        return self.conductor.report_inventory(context, hostname, report)


class _FPGA(tp._ReportedFPGA):
    def __init__(self, conf, db):
        self.conductor = _OnItsWay(conf)
        super().__init__(conf, db, conductor=self.conductor)

    def report(self, full=False, meanwhile=None):
        """The agent's next report (``meanwhile()`` run once it is read,
        before the conductor has it): whether it was a full one."""
        self.conductor.meanwhile = meanwhile
        self.reporter.report_now(full=full)
        return self.reporter.last_report['full']


def _function_trait(db, card):
    with db.connect() as c:
        return c.execute(sa.select(models.Attribute.value).where(
            models.Attribute.deployable_id == card.deployable_id,
            models.Attribute.key == programming.TRAIT_ATTRIBUTE)).scalar()


def test_a_report_read_before_a_programming_ended_keeps_its_image(
        pconf, ctx, db, glance):
    fpga = _FPGA(pconf, db)
    card = fpga.row
    image = glance.add_image(b'new' * 10, {'accel:function_id': 'f9'})

    def program():
        with seed.agent_endpoint(pconf, HOST,
                                 {'fake_driver': fpga.driver}):
            programming.program_deployable(pconf, ctx,
                                           card.deployable_uuid, image)
        assert tp._bitstream(ctx, card) == image

    # A full report (an agent restarted, or asked for one) read before
    # the programming ended, stored after it.
    assert fpga.report(full=True, meanwhile=program)
    assert tp._bitstream(ctx, card) == image
    assert _function_trait(db, card) == 'CUSTOM_FPGA_FUNCTION_ID_F9'
    assert 'CUSTOM_FPGA_FUNCTION_ID_F9' in tp._provider(pconf,
                                                        card.rp_uuid)[1]
    # The agent's next report, read after the programming, is a full
    # one: the conductor stored what the stale one said but its image.
    assert fpga.report()
    assert tp._bitstream(ctx, card) == image
    assert not fpga.report()    # then unchanged deltas again
    assert tp._bitstream(ctx, card) == image


def test_an_unchanged_delta_read_before_a_programming_ended(
        pconf, ctx, db, glance):
    """The agent's periodic delta (nothing changed: the card is reported
    as last acknowledged while it is programmed) is answered need_full
    after a programming, and the agent sends the same picture in full:
    it keeps the programmed image as well, and the report after it,
    read after the programming, stores the card as it now is."""
    fpga = _FPGA(pconf, db)
    card = fpga.row
    image = glance.add_image(b'delta' * 10)

    def program():
        with seed.agent_endpoint(pconf, HOST,
                                 {'fake_driver': fpga.driver}):
            programming.program_deployable(pconf, ctx,
                                           card.deployable_uuid, image)

    fpga.report(meanwhile=program)
    assert tp._bitstream(ctx, card) == image
    fpga.report()
    assert tp._bitstream(ctx, card) == image
    assert not fpga.report()
    assert tp._bitstream(ctx, card) == image


def test_an_image_changed_by_no_programming_is_stored_at_once(
        pconf, ctx, db, glance):
    """The first report after a programming keeps the image the
    programming recorded; a report with no programming before it stores
    the image the agent reports, as ever."""
    fpga = _FPGA(pconf, db)
    card = fpga.row
    image = str(uuidlib.uuid4())
    fpga.driver.program(fake.CONTROLPATH_ADDRESS, None, image)
    assert not fpga.report()
    assert tp._bitstream(ctx, card) == image
