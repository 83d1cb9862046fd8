"""cyborg-status upgrade check: real checks on a real database file."""

import json

import pytest
import sqlalchemy as sa

from cyborg.cmd import status
from cyborg.db import migration
from cyborg.placement import client as placement_client
from tests.fixtures import arqs as seed
from tests.fixtures import databases
from tests.fixtures import placement as placement_fixture
from tests.fixtures import processes
from tests.fixtures import recording_http

fake_glance = recording_http.fake_glance


def _check(tmp_path, url, policy_file=None, health=None,
           placement_url=None, upgrade_levels=None):
    sections = {'database': {'connection': url}}
    if upgrade_levels:
        sections['upgrade_levels'] = upgrade_levels
    if placement_url:
        sections['placement'] = placement_fixture.placement_options(
            placement_url)
    if policy_file:
        sections['oslo_policy'] = {'policy_file': str(policy_file)}
    if health:
        sections['health'] = health
    config = processes.write_config(tmp_path / 'cyborg.conf', sections)
    with pytest.raises(SystemExit) as exit_info:
        status.main(['--config-file', str(config), 'upgrade', 'check'])
    return exit_info.value.code


def test_empty_database_fails_then_passes_after_upgrade(tmp_path, capsys):
    with databases.throwaway_database('sqlite') as url:
        assert _check(tmp_path, url) == 2
        assert 'has no cyborg schema' in capsys.readouterr().out
        migration.upgrade(url)
        assert _check(tmp_path, url) == 0


def test_old_schema_revision_fails(tmp_path, capsys):
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        migration.stamp(url, 'base')
        assert _check(tmp_path, url) == 2


def _words(out):
    """The words of the check table's rows (it wraps its lines)."""
    return ' '.join(word for line in out.split('\n')
                    if line.startswith('|')
                    for word in line.strip('| ').split())


def test_a_schema_recorded_newer_than_its_tables_fails(tmp_path, capsys):
    """2027.1's schema (revision 8d3e6b1c4f70) stamped as the newest with
    --force: the revision row says the newest, the tables are 2027.1's.
    The check read only the row and passed; the services then failed on
    the missing columns."""
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url, '8d3e6b1c4f70')
        migration.stamp(url, 'head')
        assert _check(tmp_path, url) == 2
        words = _words(capsys.readouterr().out)
        assert ('is recorded at revision %s, the newest, but lacks '
                % migration.head()) in words, words
        assert 'hosts.sync_serial' in words
        assert 'placement_releases' in words
        assert ('Run "cyborg-dbsync stamp --revision base", then '
                '"cyborg-dbsync upgrade"') in words
        # What it says to do mends it.
        migration.stamp(url, 'base')
        migration.upgrade(url)
        assert _check(tmp_path, url) == 0


def test_a_schema_a_newer_release_upgraded_warns(tmp_path, capsys):
    """In a rolling upgrade's middle this release runs on a schema the
    next one has expanded: its check said FAILURE and told the operator
    to run cyborg-dbsync upgrade, which cannot know that revision."""
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        engine = sa.create_engine(url)
        with engine.begin() as c:
            c.execute(sa.text("UPDATE alembic_version SET version_num = "
                              "'0123456789ab'"))
        engine.dispose()
        assert _check(tmp_path, url) == 1
        words = _words(capsys.readouterr().out)
        assert 'which this release does not know' in words, words
        assert 'run "cyborg-dbsync upgrade"' not in words


def test_json_policy_file_fails(tmp_path, capsys):
    policy = tmp_path / 'policy.json'
    policy.write_text(json.dumps({'cyborg:device:get_all': 'role:admin'}))
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        assert _check(tmp_path, url, policy) == 2
        assert 'YAML' in capsys.readouterr().out


def test_yaml_policy_file_passes_and_broken_yaml_fails(tmp_path, capsys):
    policy = tmp_path / 'policy.yaml'
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        policy.write_text('"cyborg:device:get_all": "role:admin"\n')
        assert _check(tmp_path, url, policy) == 0
        policy.write_text('"cyborg:device:get_all": [unclosed\n')
        assert _check(tmp_path, url, policy) == 2


def test_health_timers_that_do_not_fit_together_warn(tmp_path, capsys):
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        assert _check(tmp_path, url) == 0
        capsys.readouterr()
        assert _check(tmp_path, url, health={'report_interval': 300,
                                             'suspect_window': 300}) == 1
        out = capsys.readouterr().out
        assert 'report_interval (300 s) is not shorter' in out
        assert _check(tmp_path, url, health={'report_interval': 300,
                                             'suspect_window': 300,
                                             'enabled': False}) == 0


@pytest.mark.parametrize('kind', ['mysql', 'postgresql', 'sqlite'])
def test_the_clock_is_compared_with_the_database_server_s(kind, tmp_path,
                                                          capsys):
    # The API and the conductor compare their clocks (answer_by); each
    # host's against the database server's bounds them.  Here both run
    # on this machine: within the tolerance.  SQLite has no clock of its
    # own: nothing to compare.
    import sqlalchemy as sa

    from cyborg.db.api import clock as clock_db

    with databases.throwaway_database(kind) as url:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        with engine.connect() as connection:
            skew = clock_db.skew_on(connection)
            if kind == 'mysql':
                # MariaDB lets a session set its own clock: a server 100 s
                # behind is a host 100 s ahead.
                connection.exec_driver_sql(
                    'SET timestamp = UNIX_TIMESTAMP() - 100')
                ahead = clock_db.skew_on(connection)
                assert 99 < ahead < 101, ahead
        engine.dispose()
        if kind == 'sqlite':
            assert skew is None
        else:
            assert abs(skew) < 1.0
        migration.upgrade(url)
        assert _check(tmp_path, url) == 0
    out = capsys.readouterr().out
    assert "Clock near the database server's" in out


def test_debug_is_accepted_and_shows_why_a_check_failed(tmp_path, capsys):
    """Like every cyborg command, ``--debug`` (and the other logging
    options) work; a failed check then logs its whole error."""
    config = processes.write_config(tmp_path / 'cyborg.conf', {
        'database': {'connection': f'sqlite:///{tmp_path}/no/such/dir.db'}})
    with pytest.raises(SystemExit) as exit_info:
        status.main(['--config-file', str(config), '--debug',
                     'upgrade', 'check'])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert 'Cannot read the schema revision' in captured.out
    assert 'Traceback' in captured.out + captured.err


@pytest.mark.parametrize('make, why', [
    (lambda path: path.write_bytes(b'"cyborg:device:get_all": "\xff"\n'),
     "can't decode byte 0xff"),
    (lambda path: path.write_bytes(b'{"cyborg:device:get_all": "\xe9"}'),
     "can't decode byte 0xe9"),
    (lambda path: path.mkdir(), 'Is a directory'),
])
def test_a_policy_file_that_cannot_be_read_fails_and_the_rest_run(
        tmp_path, capsys, make, why):
    """Not UTF-8, or a directory: each policy check fails naming the
    file, and the checks after them are still reported (it was a
    UnicodeDecodeError or IsADirectoryError traceback, exit 255)."""
    policy = tmp_path / 'policy.yaml'
    make(policy)
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        assert _check(tmp_path, url, policy) == 2
    out = capsys.readouterr().out
    # The table wraps the details anywhere: compared without spaces.
    text = ''.join(out.replace('|', ' ').split())
    assert text.count(''.join((
        'Policy file %s cannot be read as UTF-8 text' % policy).split())
    ) == 2, out
    assert ''.join(why.split()) in text, out
    assert 'Health timers fit together' in out
    assert "Clock near the database server's" in out


def test_placement_serving_our_microversion_passes(tmp_path, capsys,
                                                   placement):
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        assert _check(tmp_path, url, placement_url=placement.url) == 0
    assert 'Placement serves the microversion' in capsys.readouterr().out


def test_a_placement_too_old_fails_naming_what_cyborg_needs(tmp_path,
                                                            capsys):
    """A Placement older than the microversion cyborg pins answers every
    call of the conductor with a 406: say so before the upgrade."""
    with databases.throwaway_database('sqlite') as url, \
            placement_fixture.older_placement('1.36') as server:
        migration.upgrade(url)
        assert _check(tmp_path, url, placement_url=server.url) == 2
    text = ''.join(capsys.readouterr().out.replace('|', ' ').split())
    assert ''.join((
        'Placement serves microversions up to 1.36; cyborg needs %s (the '
        'Placement of OpenStack %s or newer)' % (
            placement_client.MICROVERSION,
            placement_client.MICROVERSION_SINCE)).split()) in text


def test_placement_that_cannot_be_reached_fails(tmp_path, capsys):
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        assert _check(tmp_path, url, placement_url='http://127.0.0.1:9') == 2
    text = ''.join(capsys.readouterr().out.replace('|', ' ').split())
    assert "CannotreadPlacement'sversions" in text
    assert 'Placementcannotbereached' in text


def test_a_policy_rule_naming_an_undefined_rule_fails(tmp_path, capsys):
    """YAML that parses but a rule cyborg-api refuses at start."""
    policy = tmp_path / 'policy.yaml'
    policy.write_text('"cyborg:device:get_all": "rule:no_such_rule"\n')
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        assert _check(tmp_path, url, policy) == 2
    text = ''.join(capsys.readouterr().out.replace('|', ' ').split())
    assert 'no_such_rule' in text


def _check_quota(tmp_path, url, capsys, **sections):
    config = processes.write_config(tmp_path / 'cyborg.conf', {
        'database': {'connection': url}, **sections})
    with pytest.raises(SystemExit) as exit_info:
        status.main(['--config-file', str(config), 'upgrade', 'check'])
    return exit_info.value.code, ''.join(
        capsys.readouterr().out.replace('|', ' ').split())


def test_quotas_off_pass_and_a_keystone_not_reached_fails(tmp_path, capsys):
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        code, text = _check_quota(tmp_path, url, capsys)
        assert code == 0 and 'Quotasareoff' in text
        code, text = _check_quota(
            tmp_path, url, capsys,
            quota={'driver': 'unified_limits'},
            oslo_limit={'auth_type': 'password',
                        'auth_url': 'http://127.0.0.1:9/v3',
                        'username': 'cyborg', 'password': 'x',
                        'user_domain_name': 'Default',
                        'system_scope': 'all',
                        'endpoint_id': 'e' * 32})
    assert code == 2, text
    assert 'CannotaskKeystoneaboutlimits' in text


def _upgrade_levels_result(out):
    """The words of the [upgrade_levels] check's row, the last."""
    words = _words(out)
    return words[words.index('No [upgrade_levels] cap left set'):]


def test_an_upgrade_levels_cap_left_set_warns(tmp_path, capsys):
    """A cap set for a rolling upgrade's mixed window and never removed:
    the calls this release added stay off for good (the mdevs of Bound
    ARQs never made again at an agent's start, deletes not guarded by
    the conductor, an mdev removed without its type checked), and the
    check said nothing of it."""
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        assert _check(tmp_path, url) == 0
        assert _upgrade_levels_result(capsys.readouterr().out).startswith(
            'No [upgrade_levels] cap left set Result: Success')
        assert _check(tmp_path, url, upgrade_levels={
            'conductor': '2027.1', 'agent': '2027.1'}) == 1
        words = _upgrade_levels_result(capsys.readouterr().out)
        assert 'Result: Warning' in words
        assert ('[upgrade_levels]conductor = 2027.1 caps the conductor '
                'RPC API at 1.4') in words
        # What it disables, from the version history.
        assert '1.5 (arq_delete takes guard_holding' in words
        assert '1.9 (Added bound_mdevs' in words
        assert ('[upgrade_levels]agent = 2027.1 caps the agent RPC API '
                'at 1.1') in words
        assert '1.2 (remove_vgpu_mdev takes asked_type' in words
        assert 'once every agent runs this release' in words
        # A cap at this release's version disables nothing yet, but
        # would cap the next release's calls.
        assert _check(tmp_path, url, upgrade_levels={'agent': '1.2'}) == 1
        words = _upgrade_levels_result(capsys.readouterr().out)
        assert 'caps nothing in this release' in words
        assert '[upgrade_levels]conductor' not in words


def _fpga_images_result(out):
    """The words of the FPGA images check's row, the last."""
    words = _words(out)
    return words[words.index(
        'FPGA images of device profiles usable by their projects'):]


def test_a_profiles_image_the_new_owner_rule_would_not_find_warns(
        tmp_path, capsys, fake_glance):
    """Bitstreams uploaded as an administrator belong to the admin
    project, ``shared`` by default; the [glance] credentials are the
    service project's.  After the upgrade no project may use them: the
    check says so before, naming the profile, the image and its owner,
    and passes once the owner is trusted."""
    admin = 'admin-project'
    image = fake_glance.add_image(b'bits', {'accel:function_id': 'f-a'},
                                  owner=admin, visibility='shared')
    public = fake_glance.add_image(b'pub', {'accel:function_id': 'f-p'})
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        engine = sa.create_engine(url)
        try:
            seed.seed_profile(engine, [{
                'resources:FPGA': '1', 'accel:bitstream_id': image}],
                name='by-id')
            seed.seed_profile(engine, [{
                'resources:FPGA': '1', 'accel:function_id': 'f-a'}],
                name='by-function')
            seed.seed_profile(engine, [{
                'resources:FPGA': '1', 'accel:function_id': 'f-p'}],
                name='fine')
            seed.seed_profile(engine, [{
                'resources:FPGA': '1', 'accel:function_id': 'f-gone'}],
                name='not-in-glance')
        finally:
            engine.dispose()
        glance = {'auth_type': 'none', 'endpoint_override': fake_glance.url}
        # No [glance]: not checked (said so).
        code, text = _check_quota(tmp_path, url, capsys)
        assert code == 0
        assert '[glance]isnotconfiguredonthishost' in text, text
        config = processes.write_config(tmp_path / 'cyborg.conf', {
            'database': {'connection': url}, 'glance': glance})
        with pytest.raises(SystemExit) as exit_info:
            status.main(['--config-file', str(config), 'upgrade', 'check'])
        words = _fpga_images_result(capsys.readouterr().out)
        assert exit_info.value.code == 1, words
        assert 'Result: Warning' in words
        assert (f'Device profile by-id: its accel:bitstream_id image '
                f'{image} (owner {admin}, visibility shared) is not one '
                f'every project may use') in words
        assert ('Device profile by-function: its accel:function_id f-a '
                'names 0 image(s) every project may use') in words
        assert f'owner(s) {admin}' in words
        assert '[glance]trusted_image_owners' in words
        assert 'fine' not in words and 'not-in-glance' not in words
        assert public
        config = processes.write_config(tmp_path / 'cyborg.conf', {
            'database': {'connection': url},
            'glance': dict(glance, trusted_image_owners=admin)})
        with pytest.raises(SystemExit) as exit_info:
            status.main(['--config-file', str(config), 'upgrade', 'check'])
        words = _fpga_images_result(capsys.readouterr().out)
        assert exit_info.value.code == 0, words
        assert 'Result: Success' in words
