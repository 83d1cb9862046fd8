"""API microversions: the one list, and the version a request asked for.

Code branches with ``version.matches((2, 2))``, never by comparing strings.
"""

import re

from cyborg.common import exception

SERVICE_TYPE = 'accelerator'
HEADER = 'OpenStack-API-Version'
MIN_HEADER = 'OpenStack-API-Minimum-Version'
MAX_HEADER = 'OpenStack-API-Maximum-Version'
# HEADER as the WSGI environ names it.
_ENVIRON_HEADER = 'HTTP_' + HEADER.upper().replace('-', '_')
# Where the application leaves the version it serves a request at, for
# the response headers (``answered_at``).
SERVED = 'cyborg.api_version'

# Every microversion, oldest first, with what it changed.  Our own additions
# start at 2.4, one per feature.
VERSIONS = [
    '2.0',  # Initial version of the v2 API.
    '2.1',  # ARQ bind PATCH may carry /project_id (admin only).
    '2.2',  # GET /device_profiles/{name} accepts a name as well as a uuid.
    '2.3',  # Devices show their status ('enabled' | 'maintaining').
    '2.4',  # Health on devices, deployables and ARQs; GET /devices?health=.
    '2.5',  # Device profiles: visibility (public | private), projects, owner.
    '2.6',  # POST /accelerator_requests/{uuid}/allocate; ARQ consumers.
    '2.7',  # GET /quotas and /quotas/{project_id}: limits and usage.
    '2.8',  # /remote_pools: remote (fabric-attached) accelerator pools.
    '2.9',  # /exports: inventory as Kubernetes ResourceSlices, gres.conf.
    '2.10',  # Deployables show programming_until (an FPGA being written).
    '2.11',  # Lists of devices, ARQs, profiles, attributes: paged.
    '2.12',  # Remote pool lists paged.
]

# The microversions code branches on, named by what they brought.
BIND_PROJECT_ID = (2, 1)
PROFILE_BY_NAME = (2, 2)
DEVICE_STATUS = (2, 3)
HEALTH = (2, 4)
PROFILE_VISIBILITY = (2, 5)
STANDALONE = (2, 6)
QUOTAS = (2, 7)
REMOTE_POOLS = (2, 8)
EXPORTS = (2, 9)
PROGRAMMING = (2, 10)
PAGINATION = (2, 11)
REMOTE_POOLS_PAGED = (2, 12)

_FORMAT = re.compile(r'^([1-9]\d*)\.(0|[1-9]\d*)$')
# A number longer than this is no version we will have, and one of
# thousands of digits is more than int() takes (a ValueError, a 500).
_MAX_DIGITS = 6


class APIVersion:
    """A (major, minor) microversion a request is served at."""

    def __init__(self, major, minor):
        self.major = major
        self.minor = minor

    @classmethod
    def parse(cls, text):
        """The version ``text`` names: 400 when it is malformed, 406 when
        a number is too long for any version to have it."""
        match = _FORMAT.match(text.strip())
        if not match:
            raise exception.Invalid(
                reason='invalid microversion %r; expected "accelerator '
                       '2.N" or "accelerator latest"' % text)
        if max(map(len, match.groups())) > _MAX_DIGITS:
            shown = text.strip()
            raise _out_of_range(shown if len(shown) <= 20
                                else shown[:20] + '...')
        return cls(int(match.group(1)), int(match.group(2)))

    def as_tuple(self):
        return (self.major, self.minor)

    def matches(self, min_version=None, max_version=None):
        """True when min_version <= self <= max_version (either optional)."""
        mine = self.as_tuple()
        if min_version is not None and mine < tuple(min_version):
            return False
        if max_version is not None and mine > tuple(max_version):
            return False
        return True

    def __eq__(self, other):
        return self.as_tuple() == other.as_tuple()

    def __str__(self):
        return '%d.%d' % self.as_tuple()

    def __repr__(self):
        return 'APIVersion(%s)' % self


MIN_VERSION = APIVersion.parse(VERSIONS[0])
MAX_VERSION = APIVersion.parse(VERSIONS[-1])


def _requested(header_value):
    """The accelerator version named in the header, or None.

    The header may list several services ("compute 2.1, accelerator 2.2").
    """
    for item in (header_value or '').split(','):
        parts = item.strip().split(None, 1)
        if len(parts) == 2 and parts[0].lower() == SERVICE_TYPE:
            return parts[1].strip()
    return None


def from_headers(headers):
    """The version a request asked for: the header, ``latest`` or 2.0.

    Raises 400 for a malformed version and 406 for one out of range.
    """
    requested = _requested(headers.get(HEADER))
    if requested is None:
        return MIN_VERSION
    if requested.lower() == 'latest':
        return MAX_VERSION
    version = APIVersion.parse(requested)
    if not version.matches(MIN_VERSION.as_tuple(), MAX_VERSION.as_tuple()):
        raise _out_of_range(version)
    return version


def _out_of_range(version):
    return exception.NotAcceptable(
        reason='version %s is not supported by the API; minimum is %s '
               'and maximum is %s' % (version, MIN_VERSION, MAX_VERSION))


def response_headers(version):
    """Headers every /v2 response carries; without ``HEADER`` when
    ``version`` is None (no version served: the one asked for is
    malformed or out of range)."""
    served = [] if version is None else [
        (HEADER, '%s %s' % (SERVICE_TYPE, version))]
    return served + [(MIN_HEADER, str(MIN_VERSION)),
                     (MAX_HEADER, str(MAX_VERSION)),
                     ('Vary', HEADER)]


def answered_at(environ):
    """The version a /v2 response names: the one the application served
    the request at (``SERVED``); for a request answered before the
    application read its version (auth_token's 401, the body limit's
    413, a path that is not UTF-8), the one it asked for.  None when
    that one is malformed or out of range: such a request is served at
    no version, and its answer (the application's 400 or 406, or an
    error made before) names none, only the range (``MIN_HEADER``,
    ``MAX_HEADER``), as Cyborg's and Placement's do; naming 2.0 told the
    client a version it had not asked for was served."""
    version = environ.get(SERVED)
    if version is not None:
        return version
    try:
        return from_headers({HEADER: environ.get(_ENVIRON_HEADER)})
    except exception.CyborgException:
        return None


def with_response_headers(headers, version):
    """WSGI ``headers`` with those every /v2 response carries at
    ``version`` (``response_headers``) in place of any already there
    (an ``HEADER`` already there is dropped when ``version`` is None);
    ``Vary`` keeps what it named (CORS's ``Origin``)."""
    ours = response_headers(version)
    names = {name.lower() for name, _value in ours} | {HEADER.lower()}
    varies = [item.strip() for name, value in headers
              if name.lower() == 'vary' for item in value.split(',')
              if item.strip()]
    if HEADER.lower() not in (item.lower() for item in varies):
        varies.append(HEADER)
    return ([(name, value) for name, value in headers
             if name.lower() not in names]
            + [(name, value) for name, value in ours if name != 'Vary']
            + [('Vary', ', '.join(varies))])
