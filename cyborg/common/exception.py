"""Cyborg's exceptions. Each carries the HTTP status the API answers with.

The API turns a CyborgException into the error body described in
doc/source/contract.rst ("Errors") with ``code`` as the status; anything
else becomes a 500.
"""

import re

from oslo_db import exception as db_exc
import sqlalchemy.exc

# The database being unreachable: an expected outage (a 503 and one log
# line), not a bug.  oslo.db does not recognise every driver's way of
# saying so (libpq's "connection to server ... failed" comes through as
# SQLAlchemy's OperationalError, which oslo.db passes on as it is).
DB_OUTAGES = (db_exc.DBConnectionError, db_exc.CantStartEngineError,
              sqlalchemy.exc.OperationalError)
# The database server there, but not cyborg's schema (a service started
# before ``cyborg-dbsync upgrade``, the database dropped): a 503 that
# says so, and start-up jobs that wait for it, as for an outage
# (``db_not_ready``).  oslo.db names some such errors; the others are
# told by the server's code: MySQL/MariaDB's "no such table" and "unknown
# database", PostgreSQL's SQLSTATEs for both, SQLite's message.
_NOT_READY_ERRNOS = (1146, 1049)
_NOT_READY_SQLSTATES = ('42P01', '3D000')
DB_NOT_READY_REASON = ('the database has no cyborg schema yet (run '
                       '"cyborg-dbsync upgrade")')

def db_not_ready(error):
    """Whether ``error`` says the database has no cyborg schema (see
    ``_NOT_READY_ERRNOS``)."""
    if isinstance(error, (db_exc.DBNonExistentDatabase,
                          db_exc.DBNonExistentTable)):
        return True
    # oslo.db's DBError wraps SQLAlchemy's, which wraps the driver's.
    error = getattr(error, 'inner_exception', None) or error
    original = getattr(error, 'orig', None)
    if not isinstance(error, sqlalchemy.exc.DBAPIError) or original is None:
        return False
    args = getattr(original, 'args', ())
    return bool(
        (args and args[0] in _NOT_READY_ERRNOS)
        or getattr(original, 'pgcode', None) in _NOT_READY_SQLSTATES
        or getattr(original, 'sqlstate', None) in _NOT_READY_SQLSTATES
        or 'no such table' in str(original))


# The most of an error's message a log line or an answer quotes.
FIRST_LINE_LIMIT = 300


def first_line(error):
    """The first line of ``error``'s message (of the driver's error inside
    a SQLAlchemy one), without the remote traceback oslo.messaging appends
    to a RemoteError's, at most FIRST_LINE_LIMIT characters; the type's
    name when it has no message."""
    lines = str(getattr(error, 'orig', None) or error).strip().splitlines()
    return lines[0][:FIRST_LINE_LIMIT] if lines else type(error).__name__


# What a CyborgException says of itself in its traceback, for an API that
# does not know its class.  Raised in a conductor, it reaches the API over
# RabbitMQ as oslo.messaging's RemoteError: its class name, its message and
# its formatted traceback, nothing else (its kwargs and args are dropped
# unless the API could rebuild the class itself).  An API older than the
# conductor knows the class by name only where both releases have it; with
# this note, which Python (3.11 and later) prints after the exception's
# line in every traceback, it answers the conductor's status, as the
# nearest class it knows (``remote_status``).  The 2027.1 API reads no
# note: there, errors it has no class for read as 503 (doc/source/
# upgrade.rst).
_STATUS_NOTE = 'HTTP %d from cyborg (%s)'
_STATUS_NOTE_LINE = re.compile(
    r'^HTTP ([45][0-9][0-9]) from cyborg \(([A-Za-z_][\w, ]*)\)$')


class CyborgException(Exception):
    """Base exception: subclasses set ``message`` (a format) and ``code``."""

    message = 'An unknown exception occurred.'
    code = 500

    def __init__(self, message=None, **kwargs):
        self.kwargs = kwargs
        if message is None:
            try:
                message = self.message % kwargs
            except (KeyError, TypeError):
                message = self.message
        self.msg = str(message)
        super().__init__(self.msg)
        if hasattr(self, 'add_note'):       # Python 3.11 (PEP 678)
            self.add_note(_STATUS_NOTE % (self.code, ', '.join(
                cls.__name__ for cls in type(self).__mro__
                if issubclass(cls, CyborgException))))

    def __str__(self):
        return self.msg


def remote_status(exc_type, traceback):
    """(code, class names) that a CyborgException of class ``exc_type``
    raised elsewhere noted in ``traceback`` (a RemoteError's: the list
    ``traceback.format_exception`` made), its own class's name first and
    CyborgException's last; None without such a note (an exception of
    another kind, one from Python 3.10).  Only a note of the exception
    itself counts: its notes are the traceback's last entries, one entry
    each, after the entry of its class and message.  The exceptions it
    was raised from (or while handling) are earlier, with their notes;
    a message that has such a line in it is within its own entry, so an
    error whose text a user chose cannot pass itself off as cyborg's."""
    for entry in reversed(traceback or ()):
        found = _STATUS_NOTE_LINE.match(entry.rstrip('\n'))
        if found is None:
            return None
        names = [name.strip() for name in found.group(2).split(',')]
        if names[0] == exc_type:
            return int(found.group(1)), names
    return None


class Invalid(CyborgException):
    message = 'Invalid input: %(reason)s'
    code = 400


class InvalidParameterValue(Invalid):
    message = '%(err)s'


class NotFound(CyborgException):
    message = 'Resource could not be found.'
    code = 404


class ResourceNotFound(NotFound):
    message = '%(resource)s %(id)s could not be found.'


class DeviceProfileNotFound(NotFound):
    message = 'Device profile %(name)s could not be found.'


class ARQNotFound(NotFound):
    message = 'Accelerator request %(uuid)s could not be found.'


class Conflict(CyborgException):
    message = 'Conflict: %(reason)s'
    code = 409


class NoCandidate(Conflict):
    """Standalone allocation found no free accelerator to claim."""
    message = ('No free accelerator matches accelerator request %(uuid)s '
               '(%(wanted)s): %(reason)s')


class DuplicateName(Conflict):
    message = '%(resource)s with name %(name)s already exists.'


class DuplicateUUID(Conflict):
    message = '%(resource)s with uuid %(uuid)s already exists.'


class InUse(Conflict):
    message = '%(resource)s %(id)s is in use: %(reason)s'


class Forbidden(CyborgException):
    message = 'Forbidden: %(reason)s'
    code = 403


class PolicyNotAuthorized(Forbidden):
    message = 'Access was denied to the following resource: %(action)s'


class ServiceTokenRequired(Forbidden):
    message = '%(action)s requires a service token.'


class QuotaExceeded(Forbidden):
    """A request that would take a project over its limits; the message
    names each limit, the usage and what was requested."""
    message = 'Quota exceeded: %(reason)s'


class NotAcceptable(CyborgException):
    message = 'Not acceptable: %(reason)s'
    code = 406


class UnsupportedMediaType(CyborgException):
    message = 'Unsupported media type: %(reason)s'
    code = 415


class Locked(CyborgException):
    message = '%(reason)s'
    code = 423


class ServiceUnavailable(CyborgException):
    message = 'Service unavailable: %(reason)s'
    code = 503


class FPGAToolFailed(CyborgException):
    """The vendor's programming tool ran and failed (on the agent): it may
    have written part of the card."""


class ProgrammingOutcomeUnknown(CyborgException):
    """A programming that may have changed the card without completing:
    what the card holds is unknown (cyborg.conductor.programming takes it
    out of the schedule until a re-probe).  ``outcome``: what happened,
    for the card's health reason."""


class ProgrammingUnfinished(ProgrammingOutcomeUnknown, ServiceUnavailable):
    """The agent did not answer a programming in time: the vendor tool may
    still be writing the card."""


class ProgrammingFailed(ProgrammingOutcomeUnknown, Conflict):
    """The vendor tool ran and failed (``FPGAToolFailed`` on the agent)."""


class ProgrammingTimedOut(ServiceUnavailable):
    """The time a programming has (``[DEFAULT]bind_timeout``) ran out
    before the agent was asked to write the card (fetching the bitstream
    from Glance took it): the card is as it was.  A 503 of its own: the
    request was good, the service could not finish it in time."""
    message = ('Could not program %(what)s in time: %(reason)s; nothing '
               'was programmed')


class BitstreamTooLarge(Invalid):
    """A bitstream over ``[glance]max_bitstream_size``: the conductor
    sends it to the agent in one RPC message, which the message broker
    would refuse."""
    message = ('Image %(image)s is too large to program (%(size)s); '
               '[glance]max_bitstream_size is %(limit)s bytes: the '
               'conductor sends a bitstream to the agent in one message, '
               'which the message broker refuses beyond its maximum size')


class PlacementError(CyborgException):
    message = 'Placement request failed: %(reason)s'
    code = 503


class BindFailed(CyborgException):
    message = 'Binding failed: %(reason)s'
    code = 400
