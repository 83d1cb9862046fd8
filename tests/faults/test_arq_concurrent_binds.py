"""50 binds at once competing for 16 attach handles, on the real MariaDB and
PostgreSQL servers: exactly 16 Bound, 34 refused (BindFailed raised by
the bind: a 400 at the API) and left Initial, no handle twice.
And a bind never fails while a handle of its device is free: a
transaction taking a handle locks that handle only (and, to check that
no programming marks the card, share-locks its own card's deployables,
none of another card's)."""

import concurrent.futures
import threading
import time
import uuid as uuidlib

from oslo_utils import timeutils
import pytest
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import arq_binding
from cyborg.conductor import programming
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import attach_handles as handle_db
from cyborg.db.api import deployables as deployable_db
from cyborg.placement import client as placement_client
from tests.fixtures import arqs as seed
from tests.fixtures import databases
from tests.fixtures import notifications
from tests.fixtures import placement as placement_fixture
from tests.fixtures import recording_http

BINDS = 50
HANDLES = 16

# The real Placement, shared by this module's tests.
placement_url = seed.placement_url
fake_nova = recording_http.fake_nova


@pytest.fixture(params=['mysql', 'postgresql'])
def server_db(request):
    with databases.throwaway_database(request.param) as url:
        databases.create_schema(url)
        engine = sa.create_engine(url, pool_size=BINDS + 5, max_overflow=10)
        undo = db_api.patch_engine(engine)
        yield engine
        undo()
        engine.dispose()


def test_fifty_binds_sixteen_handles(conf, server_db, placement_url,
                                     fake_nova):
    placement_fixture.placement_conf(conf, placement_url)
    placement_client.reset_clients()
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', fake_nova.url, group='nova')
    device = seed.seed_device(server_db, handles=HANDLES)
    profile = seed.seed_profile(server_db, [{'resources:FPGA': '1'}])
    ctx = cyborg_context.RequestContext(project_id='p1', is_service=True)
    arqs = [arq_binding.create(ctx, profile, 'p1')[0]['uuid']
            for _ in range(BINDS)]
    instance = {arq: str(uuidlib.uuid4()) for arq in arqs}

    def bind(arq_uuid):
        """The bind's future, or the BindFailed refusing it."""
        binding = {'hostname': device.hostname,
                   'device_rp_uuid': device.rp_uuid,
                   'instance_uuid': instance[arq_uuid]}
        context = cyborg_context.RequestContext(project_id='p1',
                                                is_service=True)
        try:
            return arq_binding.start_bind(conf, context,
                                          {arq_uuid: binding})
        except exception.BindFailed as e:
            return e

    with notifications.published(conf) as sent:
        with concurrent.futures.ThreadPoolExecutor(BINDS) as pool:
            work = dict(zip(arqs, pool.map(bind, arqs)))
        refused = {arq: e for arq, e in work.items()
                   if isinstance(e, exception.BindFailed)}
        accepted = [arq for arq in arqs if arq not in refused]
        for arq in accepted:
            # Its events delivered too.
            work[arq].result(60)
        # One arq.bind.end per Bound ARQ; no arq.bind.error: a refused
        # bind announces nothing.
        events = sorted((n[1]['event_type'],
                         n[1]['payload']['cyborg_object.data']['uuid'])
                        for n in sent())
    assert events == sorted(('arq.bind.end', arq) for arq in accepted)

    # Each refusal is a 400 saying why.
    assert len(refused) == BINDS - HANDLES
    assert {(e.code, str(e)) for e in refused.values()} == {
        (400, f'Binding failed: no free attach handle on resource provider '
              f'{device.rp_uuid}')}
    rows = seed.arq_rows(server_db)
    assert sorted(rows) == sorted(arqs)
    assert {arq for arq, r in rows.items() if r.state == 'Bound'} == set(
        accepted)
    # A refused bind wrote nothing: its ARQ is as it was, bindable again.
    assert {arq: (r.state, r.hostname, r.device_rp_uuid, r.instance_uuid,
                  r.attach_handle_id, r.deployable_id, r.bind_id,
                  r.bind_started_at, r.bind_owner, r.bind_failure_reason)
            for arq, r in rows.items() if arq in refused} == dict.fromkeys(
        refused, ('Initial',) + (None,) * 9)
    handles = [rows[arq].attach_handle_id for arq in accepted]
    assert None not in handles
    assert len(set(handles)) == HANDLES
    assert seed.handles_in_use(server_db) == HANDLES
    with server_db.connect() as c:
        in_use = set(c.scalars(sa.select(models.AttachHandle.id).where(
            models.AttachHandle.in_use.is_(True))))
        waiting = c.scalar(sa.select(sa.func.count()).select_from(
            models.NovaEvent))
    assert in_use == set(handles)
    # Nova heard of each Bound ARQ once, as completed, and of nothing
    # else; no event is left to send.
    assert sorted((e['tag'], e['server_uuid'], e['status'])
                  for e in fake_nova.events) == sorted(
        (arq, instance[arq], 'completed') for arq in accepted)
    assert waiting == 0


@pytest.mark.parametrize('devices', [8, 64])
def test_taking_a_handle_leaves_the_others_free(server_db, devices):
    # A bind holds the handle it took until it commits; meanwhile other
    # binds, on the same device or another, must still find the free
    # handles.  (On MariaDB, ``in_use IS false`` could not use the index
    # on (deployable_id, in_use): with a few devices the query walked the
    # primary key, locking the handles of every device before its own;
    # with more, it sorted all of its device's handles after reading,
    # locking every free one.  Concurrent binds then failed with "no free
    # attach handle".)
    seeded = [seed.seed_device(server_db, handles=HANDLES)
              for _ in range(devices)]
    first, last = seeded[0].deployable_id, seeded[-1].deployable_id
    holder = cyborg_context.RequestContext(project_id='p1', is_service=True)
    with db_api.writer.using(holder):
        held = handle_db.take(holder, last)

        def take_beside(deployable_id):
            other = cyborg_context.RequestContext(project_id='p1',
                                                  is_service=True)
            with db_api.writer.using(other):
                return handle_db.take(other, deployable_id)

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            beside = [pool.submit(take_beside, deployable_id).result(30)
                      for deployable_id in (first, last)]
    assert held is not None
    assert None not in beside, 'a free handle was locked by another bind'
    assert len({held.id} | {row.id for row in beside}) == 3
    assert seed.handles_in_use(server_db) == 3


def _one_arq(conf, engine, placement_url, handles):
    """(device, context, uuid of one unbound ARQ asking for it)."""
    placement_fixture.placement_conf(conf, placement_url)
    placement_client.reset_clients()
    device = seed.seed_device(engine, handles=handles)
    profile = seed.seed_profile(engine, [{'resources:FPGA': '1'}])
    ctx = cyborg_context.RequestContext(project_id='p1', is_service=True)
    return device, ctx, arq_binding.create(ctx, profile, 'p1')[0]['uuid']


def test_a_delete_racing_a_bind_leaves_no_handle_held(conf, server_db,
                                                      placement_url):
    # A delete reads the ARQs it deletes, then deletes them with what they
    # hold.  A bind committing between the two (it takes a handle and
    # ends Bound) must not leave that handle taken by an ARQ that is gone:
    # the delete's read locks the ARQs, so the bind waits for the delete
    # and then finds its ARQ deleted.  (On MariaDB, REPEATABLE READ, the
    # delete re-read the ARQ in its old snapshot, found it holding
    # nothing, and deleted it without releasing the bind's handle.)
    device, ctx, arq = _one_arq(conf, server_db, placement_url, handles=1)
    read = threading.Event()

    def bind():
        read.wait(30)
        context = cyborg_context.RequestContext(project_id='p1',
                                                is_service=True)
        try:
            arq_binding.start_bind(conf, context, {arq: {
                'hostname': device.hostname,
                'device_rp_uuid': device.rp_uuid,
                'instance_uuid': str(uuidlib.uuid4())}}).result(30)
        except exception.CyborgException as e:
            return e
        return None

    deleter = cyborg_context.RequestContext(project_id='p1', is_service=True)
    tries = []

    def delete():
        # As arq_binding._delete_at_once, holding the transaction open
        # between its read and its write.
        rows = arq_binding._deletable(deleter, [arq], None)
        if not tries:
            assert [r.attach_handle_id for r in rows] == [None]
            read.set()
            # The bind would run to its end here unless the read locked
            # the ARQ.
            time.sleep(1.5)
            assert not binding.done(), 'the bind did not wait'
        tries.append(len(rows))
        return arq_binding._leave_all(deleter, rows, 'Deleting',
                                      arq_binding.ANY_STATE, delete=True)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        binding = pool.submit(bind)
        # Where MariaDB finds a deadlock between the two (the bind's
        # update can lock index records before the row), it rolls back the
        # delete, which runs again as a write_retrying transaction does,
        # and then finds the ARQ Bound and releases its handle.
        moved = db_api.write_retrying(deleter, delete)
        refused = binding.result(60)
    assert moved == {arq: 'Initial'} or (len(tries) > 1 and
                                         moved == {arq: 'Bound'})
    if moved[arq] == 'Initial':
        # The bind waited for the delete, and found its ARQ gone.
        assert isinstance(refused, exception.ARQNotFound)
    assert seed.arq_rows(server_db) == {}
    assert seed.handles_in_use(server_db) == 0


@pytest.mark.parametrize('when', ['before the take', 'after the take'])
def test_a_bind_and_a_programming_never_share_a_card(conf, server_db,
                                                     placement_url,
                                                     monkeypatch, when):
    # A bind checks that no programming marks the card, then takes a
    # handle; a programming marks the card, then counts the handles taken
    # (cyborg.conductor.programming._check_unused).  A programming whose
    # mark and count fell between the bind's check and the commit of its
    # take went on rewriting a card the bind then gave an instance.  Now
    # the take checks the mark itself, and the count waits for a bind
    # still taking a handle: one of the two always sees the other.
    device, ctx, arq = _one_arq(conf, server_db, placement_url, handles=4)
    target = deployable_db.program_target(ctx, device.deployable_uuid)
    outcome = []

    def program():
        # programming.program's steps from the mark to the count.
        admin = cyborg_context.RequestContext(project_id='p1',
                                              is_service=True)
        until = timeutils.utcnow().replace(microsecond=0)
        db_api.write_retrying(admin, deployable_db.set_programming_until,
                              admin, target.deployable_id, until)
        try:
            programming._check_unused(admin, target, own_handles=0)
        except exception.InUse:
            outcome.append('refused')
        else:
            outcome.append('went on')

    take = handle_db.take
    programmer = threading.Thread(target=program)

    def take_while_a_programming_starts(context, deployable_id, **kwargs):
        # In the bind's transaction, after it checked the card.
        if when == 'before the take':
            programmer.start()
            programmer.join(30)
            return take(context, deployable_id, **kwargs)
        handle = take(context, deployable_id, **kwargs)
        programmer.start()
        programmer.join(1.5)    # it must wait for the bind's commit
        return handle

    monkeypatch.setattr(handle_db, 'take', take_while_a_programming_starts)
    try:
        arq_binding.start_bind(conf, ctx, {arq: {
            'hostname': device.hostname, 'device_rp_uuid': device.rp_uuid,
            'instance_uuid': str(uuidlib.uuid4())}}).result(30)
    except exception.BindFailed as e:
        # Refused with the PATCH, nothing written.
        assert 'is being programmed' in str(e)
    finally:
        programmer.join(30)
    bound = seed.arq_rows(server_db)[arq].state == 'Bound'
    assert (bound, outcome) == ((False, ['went on'])
                                if when == 'before the take'
                                else (True, ['refused']))
    assert seed.handles_in_use(server_db) == (1 if bound else 0)
