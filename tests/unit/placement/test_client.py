"""The Placement client against the real (embedded) Placement."""

import logging
import socket
import uuid

import pytest

from cyborg.common import exception
from cyborg.placement import client as placement_client
from cyborg.placement import embedded
from tests.fixtures import placement as placement_fixture
from tests.fixtures import recording_http


@pytest.fixture
def client(conf, placement):
    placement_fixture.placement_conf(conf, placement.url)
    return placement_client.PlacementClient(conf)


def _new_uuid():
    return str(uuid.uuid4())


def test_nested_provider_with_inventory_and_traits(client):
    cn = client.create_provider(_new_uuid(), 'cn1', None)
    child = client.create_provider(_new_uuid(), 'cn1_0000:0c:00.0',
                                   cn['uuid'])
    client.ensure_resource_classes(['CUSTOM_ACCEL', 'FPGA'])
    client.ensure_traits(['CUSTOM_FAKE', 'OWNER_CYBORG'])
    inventory = {'CUSTOM_ACCEL': {'total': 4, 'max_unit': 4, 'reserved': 4}}
    gen = client.set_inventories(child['uuid'], inventory)
    gen = client.set_traits(child['uuid'], {'CUSTOM_FAKE', 'OWNER_CYBORG'},
                            generation=gen)
    got_gen, got = client.get_inventories(child['uuid'])
    assert got_gen == gen
    assert got['CUSTOM_ACCEL']['reserved'] == 4
    assert client.get_traits(child['uuid'])[1] == {'CUSTOM_FAKE',
                                                   'OWNER_CYBORG'}
    tree = client.list_tree(cn['uuid'])
    assert {p['uuid'] for p in tree} == {cn['uuid'], child['uuid']}
    owned = client.list_tree(cn['uuid'], required=['OWNER_CYBORG'])
    assert [p['uuid'] for p in owned] == [child['uuid']]
    assert client.get_provider_by_name('cn1')['uuid'] == cn['uuid']
    assert client.get_provider_by_name('nope') is None


def test_create_adopts_and_reparents_an_existing_provider(client):
    cn1 = client.create_provider(_new_uuid(), 'cn1', None)
    cn2 = client.create_provider(_new_uuid(), 'cn2', None)
    rp = _new_uuid()
    client.create_provider(rp, 'dev', cn1['uuid'])
    adopted = client.create_provider(rp, 'dev', cn2['uuid'])
    assert adopted['parent_provider_uuid'] == cn2['uuid']
    assert client.get_provider(rp)['parent_provider_uuid'] == cn2['uuid']


def test_stale_generation_is_retried(client):
    rp = client.create_provider(_new_uuid(), 'cn', None)['uuid']
    client.set_traits(rp, {'HW_CPU_X86_AVX'})
    # Generation 0 is stale now: the client re-reads and succeeds.
    gen = client.set_inventories(rp, {'VCPU': {'total': 2}}, generation=0)
    assert client.get_inventories(rp)[0] == gen


def test_missing_provider_and_tree_raise_not_found(client):
    with pytest.raises(placement_client.ProviderNotFound):
        client.list_tree(_new_uuid())
    with pytest.raises(placement_client.ProviderNotFound):
        client.set_traits(_new_uuid(), set())
    assert client.delete_provider(_new_uuid()) is False


def test_delete_refused_while_allocated(client, placement):
    rp = client.create_provider(_new_uuid(), 'cn', None)['uuid']
    client.set_inventories(rp, {'FPGA': {'total': 1}})
    consumer = _new_uuid()
    placement_fixture.hold_allocation(placement.url, consumer,
                                      {rp: {'FPGA': 1}})
    assert set(client.get_allocations(rp)) == {consumer}
    with pytest.raises(placement_client.ProviderInUse):
        client.delete_provider(rp)


def test_unknown_trait_is_a_clear_error(client):
    rp = client.create_provider(_new_uuid(), 'cn', None)['uuid']
    with pytest.raises(exception.PlacementError, match='CUSTOM_NOT_MADE'):
        client.set_traits(rp, {'CUSTOM_NOT_MADE'})


def test_unreachable_placement_is_a_503(conf, caplog):
    # The error an API caller sees says what failed, not where Placement
    # is (its internal address is the operator's, logged here).
    caplog.set_level(logging.INFO)
    placement_fixture.placement_conf(conf, 'http://127.0.0.1:9')
    client = placement_client.PlacementClient(conf)
    with pytest.raises(exception.PlacementError) as err:
        client.get_provider_by_name('x')
    assert err.value.code == 503
    assert str(err.value) == ('Placement request failed: GET '
                              '/resource_providers?name=x: Placement cannot '
                              'be reached')
    assert '127.0.0.1:9' in caplog.text


def test_a_placement_too_old_for_our_microversion_says_so(conf, caplog):
    """A Placement older than the microversion every call pins answers
    406 to everything: each call said only "406 Unacceptable version
    header", a conductor bug to whoever read it."""
    older = placement_client.version_tuple(placement_client.MICROVERSION)
    older = f'{older[0]}.{older[1] - 1}'
    with placement_fixture.older_placement(older) as server:
        placement_fixture.placement_conf(conf, server.url)
        client = placement_client.PlacementClient(conf)
        assert client.max_microversion() == older
        with pytest.raises(placement_client.PlacementTooOld) as err:
            client.create_provider(_new_uuid(), 'cn', None)
    assert err.value.code == 503
    assert str(err.value) == (
        f'Placement serves microversions up to {older}; cyborg '
        f'needs {placement_client.MICROVERSION} (the Placement of '
        f'OpenStack {placement_client.MICROVERSION_SINCE} or newer): '
        f'upgrade Placement.')
    assert 'upgrade Placement' in caplog.text


def test_a_placement_at_exactly_our_microversion_serves_us(conf):
    with placement_fixture.older_placement(
            placement_client.MICROVERSION) as server:
        placement_fixture.placement_conf(conf, server.url)
        client = placement_client.PlacementClient(conf)
        cn = client.create_provider(_new_uuid(), 'cn', None)['uuid']
        client.ensure_resource_classes(['CUSTOM_ACCEL'])
        client.set_inventories(cn, {'CUSTOM_ACCEL': {'total': 2}})
        consumer = _new_uuid()
        assert client.claim(consumer, {cn: {'resources': {
            'CUSTOM_ACCEL': 1}}}, placement_fixture.PROJECT,
            placement_fixture.PROJECT, 'INSTANCE')
        claim = client.get_claim(consumer)
        assert claim['consumer_type'] == 'INSTANCE'
        assert client.release_claim(consumer, claim)
        assert client.get_claim(consumer)['allocations'] == {}


def test_get_client_follows_the_configured_endpoint(conf, placement):
    placement_fixture.placement_conf(conf, placement.url)
    first = placement_client.get_client(conf)
    assert placement_client.get_client(conf) is first
    placement_fixture.placement_conf(conf, 'http://127.0.0.1:9')
    assert placement_client.get_client(conf) is not first


def test_reshape_sets_the_inventories_of_several_providers(client):
    cn = client.create_provider(_new_uuid(), 'cn', None)['uuid']
    kids = [client.create_provider(_new_uuid(), f'cn_{i}', cn)
            for i in range(3)]
    assert client.reshape_inventories({
        kid['uuid']: (kid['generation'], {'FPGA': {'total': i + 1}})
        for i, kid in enumerate(kids)})
    for i, kid in enumerate(kids):
        assert client.get_inventories(kid['uuid'])[1]['FPGA']['total'] == \
            i + 1
    # A stale generation writes nothing and says why.
    with pytest.raises(exception.PlacementError) as err:
        client.reshape_inventories({
            kids[0]['uuid']: (kids[0]['generation'], {'FPGA': {'total': 9}}),
            kids[1]['uuid']: (client.get_inventories(kids[1]['uuid'])[0],
                              {'FPGA': {'total': 9}})})
    assert err.value.placement_code == placement_client.CONCURRENT_UPDATE
    assert client.get_inventories(kids[1]['uuid'])[1]['FPGA']['total'] == 2


def test_reshape_refused_by_policy_is_asked_once(conf, placement,
                                                 monkeypatch):
    # An admin that is not a service: Placement's policy says no.
    monkeypatch.setattr(placement_client, 'NOAUTH_ROLES', 'admin')
    placement_fixture.placement_conf(conf, placement.url)
    client = placement_client.PlacementClient(conf)
    rp = client.create_provider(_new_uuid(), 'cn', None)
    inventories = {rp['uuid']: (rp['generation'], {'FPGA': {'total': 1}})}
    calls = client.calls
    assert client.reshape_inventories(inventories) is False
    assert client.reshape_inventories(inventories) is False
    assert client.calls == calls + 1
    assert client.get_inventories(rp['uuid'])[1] == {}


def test_a_connection_placement_closed_is_replaced(conf):
    # Placement restarted on its port: the kept-alive connection is dead,
    # and the next call makes a new one instead of failing.
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    # Sharing the port lets the second bind while the first one's closed
    # connection lingers.
    first = embedded.EmbeddedPlacement('sqlite://', port=port,
                                       reuse_port=True)
    first.start()
    placement_fixture.placement_conf(conf, first.url)
    client = placement_client.PlacementClient(conf)
    try:
        assert client.get_provider_by_name('cn') is None
        first.stop()
        second = embedded.EmbeddedPlacement('sqlite://', port=port,
                                            reuse_port=True)
        second.start()
        try:
            assert client.get_provider_by_name('cn') is None
            client.create_provider(_new_uuid(), 'cn', None)
            assert client.get_provider_by_name('cn')['name'] == 'cn'
        finally:
            second.stop()
    finally:
        first.stop()


def test_an_unauthorized_answer_goes_through_keystoneauth(conf):
    # A 401 asks for a new token: the call is made again through the
    # keystoneauth adapter (which re-authenticates), then reported.
    refusing = recording_http.RecordingServer(
        lambda request: (401, {}, {'errors': [{'detail': 'who?'}]}))
    with refusing:
        placement_fixture.placement_conf(conf, refusing.url)
        client = placement_client.PlacementClient(conf)
        with pytest.raises(exception.PlacementError, match='401'):
            client.get_provider_by_name('cn')
    assert [(r.method, r.path) for r in refusing.requests] == [
        ('GET', '/resource_providers')] * 2


def _self_signed(folder):
    """A certificate and key for 127.0.0.1 (PEM files)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, '127.0.0.1')])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address('127.0.0.1'))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                           critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / 'cert.pem', folder / 'key.pem'
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return str(cert_path), str(key_path)


def test_https_placement_is_verified_with_the_configured_ca(conf, tmp_path):
    import ssl

    cert, key = _self_signed(tmp_path)
    server = recording_http.RecordingServer(
        lambda request: (200, {}, {'resource_providers': []}))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server._server.socket = context.wrap_socket(server._server.socket,
                                                server_side=True)
    with server:
        url = server.url.replace('http://', 'https://')
        placement_fixture.placement_conf(conf, url)
        conf.set_override('cafile', cert, group='placement')
        client = placement_client.PlacementClient(conf)
        assert client.get_provider_by_name('cn') is None
        assert client.get_provider_by_name('cn') is None
        # Both carried by the client's own TLS connection, not handed to
        # keystoneauth after a failure.
        assert [r.headers['User-Agent'] for r in server.requests] == [
            placement_client.USER_AGENT] * 2
        # Without the CA, the certificate is refused.
        conf.clear_override('cafile', group='placement')
        with pytest.raises(exception.PlacementError):
            placement_client.PlacementClient(conf).get_provider_by_name('cn')


def test_a_release_leaves_a_consumer_changed_since_its_read(client,
                                                           placement):
    """release_claim empties the consumer only at the generation read: a
    claim written since (here: the consumer's allocation replaced) is
    left, and the release answers False."""
    cn = client.create_provider(_new_uuid(), 'cn', None)['uuid']
    client.set_inventories(cn, {'FPGA': {'total': 2}})
    consumer = _new_uuid()
    allocations = {cn: {'resources': {'FPGA': 1}}}
    assert client.claim(consumer, allocations, 'p', 'u', 'K8S_POD')
    read = client.get_claim(consumer)
    placement_fixture.hold_allocation(placement.url, consumer,
                                      {cn: {'FPGA': 2}})
    assert not client.release_claim(consumer, read)
    assert client.get_claim(consumer)['allocations'][cn]['resources'] == {
        'FPGA': 2}
    assert client.release_claim(consumer, client.get_claim(consumer))
    assert client.get_claim(consumer)['allocations'] == {}
