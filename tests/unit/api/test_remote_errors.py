"""A conductor's error the API has no class for answers the conductor's
status and message, not a 500 (this release's APIs) or "503 the conductor
cannot be reached" (2027.1's): in a rolling upgrade the conductors are a
release ahead of the APIs (doc/source/upgrade.rst), and raise errors
that release added (2027.1's APIs answered a bitstream too large with a
503 instead of a 400)."""

import json
import sys

import pytest
import webob

from cyborg.common import exception
from tests.fixtures import api as api_fixture
from tests.fixtures import rabbit


class _NewConflict(exception.Conflict):
    """An error class of a newer release, under one the API knows."""
    message = 'The newer conductor refuses %(what)s'


class _NewStatus(exception.CyborgException):
    """One with a status of its own, under none the API knows but the
    base."""
    message = 'The newer conductor cannot process %(what)s'
    code = 422


class _Bug(Exception):
    """A conductor's bug (not a builtin: oslo.messaging rebuilds those as
    themselves)."""


def _create_profile(app, name):
    req = webob.Request.blank('/v2/device_profiles', method='POST')
    req.body = json.dumps([{'name': name,
                            'groups': [{'resources:FPGA': '1'}]}]).encode()
    req.content_type = 'application/json'
    resp = req.get_response(app)
    fault = json.loads(json.loads(resp.text)['error_message'])
    return resp.status_int, fault['faultstring']


@pytest.mark.skipif(sys.version_info < (3, 11),
                    reason='the status travels as an exception note '
                           '(Python 3.11)')
def test_an_error_class_the_api_does_not_know_answers_its_status(
        monkeypatch):
    from cyborg.conductor import manager

    def newer(self, context, values):
        error = {'conflict': _NewConflict, 'status': _NewStatus}
        raise error[values['name']](what=values['name'])

    # Raised where the conductor's own errors are: through its answer
    # wrapper, over RabbitMQ (the in-memory transport hands the API the
    # conductor's exception itself, class and all).
    monkeypatch.setattr(manager.ConductorManager, 'device_profile_create',
                        manager._answer(newer))
    with rabbit.throwaway_vhost() as transport_url, \
            api_fixture.api_service(transport_url=transport_url) as service:
        assert _create_profile(service.app, 'conflict') == (
            409, 'The newer conductor refuses conflict')
        assert _create_profile(service.app, 'status') == (
            422, 'The newer conductor cannot process status')


def _as_sent_over_rabbitmq(error):
    """``error`` raised in a conductor, as the API gets it over RabbitMQ:
    serialised by oslo.messaging and rebuilt as a RemoteError (cyborg's
    modules are not among those it may rebuild exceptions of)."""
    from oslo_messaging._drivers import common
    try:
        raise error
    except Exception:
        data = common.serialize_remote_exception(sys.exc_info())
    return common.deserialize_remote_exception(data, [])


@pytest.mark.skipif(sys.version_info < (3, 11),
                    reason='the status travels as an exception note '
                           '(Python 3.11)')
def test_a_bug_raised_from_a_cyborg_error_stays_a_500():
    """The traceback holds the notes of the exceptions the error was
    raised from: only the error's own counts."""
    from cyborg.api import dispatch

    req = webob.Request.blank('/v2/device_profiles', method='POST')
    try:
        raise _NewStatus(what='it')
    except _NewStatus as cause:
        bug = _Bug('a bug in the conductor')
        bug.__cause__ = cause
    resp = dispatch.error_response(req, _as_sent_over_rabbitmq(bug))
    assert resp.status_int == 500
    error = _NewConflict(what='it')
    error.__cause__ = bug
    resp = dispatch.error_response(req, _as_sent_over_rabbitmq(error))
    assert resp.status_int == 409


@pytest.mark.skipif(sys.version_info < (3, 11),
                    reason='the status travels as an exception note '
                           '(Python 3.11)')
def test_a_message_cannot_pass_an_error_off_as_cyborgs():
    """An error of another kind whose message (text a user may choose: a
    name, a driver's answer) holds a line shaped as cyborg's note is
    still a 500: only the error's own notes, each an entry of its own at
    the traceback's end, count."""
    from cyborg.api import dispatch

    req = webob.Request.blank('/v2/device_profiles', method='POST')
    for forged in ('HTTP 409 from cyborg (_Bug, Conflict, CyborgException)',
                   'HTTP 409 from cyborg (_Bug, CyborgException)'):
        bug = _Bug(f'a name the user gave\n{forged}')
        resp = dispatch.error_response(req, _as_sent_over_rabbitmq(bug))
        assert resp.status_int == 500, forged
