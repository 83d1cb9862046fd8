"""What every handler uses: the request, JSON out, links, policy.

A handler is ``verb_noun(r, **path_vars)``: by the time it runs, the
dispatcher has checked the operation's policy rule and validated
``r.query`` and ``r.body``.  It reads through ``cyborg.objects`` or writes
through the conductor RPC API and returns the body to answer, shaped by a
view (or None for 202 and 204).
"""

import json
import urllib.parse
import uuid as uuidlib

import webob
from oslo_utils import uuidutils

from cyborg.api import microversion
from cyborg.common import exception
from cyborg.common import policy


class ApiRequest:
    """A request as handlers see it."""

    def __init__(self, req):
        self.req = req
        self.context = req.cyborg_context
        self.version = req.version
        self.conf = req.conf
        self.conductor = req.conductor
        # Once per request: lists build two links per item.
        base = self.conf.api.public_endpoint
        if not base:
            base = req.host_url + req.script_name
        self.base_url = base.rstrip('/')
        # Set by the dispatcher, validated against the operation's schemas.
        self.query = {}
        self.body = None

    def url(self, *parts):
        """An absolute link: [api]public_endpoint or the request's URL."""
        return '/'.join([self.base_url] + [p.strip('/') for p in parts])

    def authorize(self, rule, target=None):
        """Raise 403 unless policy allows ``rule`` on ``target``."""
        policy.authorize(self.conf, self.context, rule, target)


def page_of(r, since=microversion.PAGINATION):
    """(limit, marker) of a list request: from microversion ``since``
    (2.11; 2.12 for remote pools) at most ``?limit=`` items, and at most
    (also by default) ``[api]max_limit``, after the one whose uuid is
    ``?marker=``; (None, None) before it, where a list has every item."""
    if not r.version.matches(since):
        return None, None
    max_limit = r.conf.api.max_limit
    return (min(int(r.query.get('limit', max_limit)), max_limit),
            marker_of(r))


def canonical_uuid(value):
    """``value`` as uuids are stored (lower case, dashed) when it is a uuid
    in any spelling, else as it is: a uuid in upper case or without dashes
    then names the same item on every database (MariaDB's collation would
    find the upper case one, PostgreSQL would not)."""
    if isinstance(value, str) and uuidutils.is_uuid_like(value):
        return str(uuidlib.UUID(value))
    return value


def marker_of(r):
    """``?marker=`` as uuids are stored (``canonical_uuid``), or None."""
    marker = r.query.get('marker')
    return None if marker is None else canonical_uuid(marker)


def read_page(r, resource, read, since=microversion.PAGINATION):
    """``read(limit, marker)`` for the page ``r`` asks for (a list paged
    from microversion ``since``), with one item more than the page holds,
    to tell whether there is a next page (see ``paged``); 404 when the
    marker names no ``resource`` the caller may list."""
    limit, marker = page_of(r, since)
    items = read(None if limit is None else limit + 1, marker)
    if items is None:
        raise exception.ResourceNotFound(resource=f'Marker {resource}',
                                         id=marker)
    return items


def paged(r, key, collection, items, show, limit=None,
          since=microversion.PAGINATION):
    """The body of a list: ``items`` (read with one more than the page
    holds, as ``read_page`` does) shown, ``limit`` of them (by default
    what ``page_of`` says), and from microversion ``since`` (the list's
    paging, 2.11 but for remote pools), where more follow, ``<key>_links``
    with the link to the next page: the same query, its marker the last
    item shown."""
    if limit is None:
        limit, _marker = page_of(r, since)
    more = limit is not None and len(items) > limit
    if more:
        items = items[:limit]
    body = {key: [show(r, item) for item in items]}
    if more and r.version.matches(since):
        query = dict(r.query, limit=str(limit), marker=items[-1].uuid)
        body[key + '_links'] = [{
            'rel': 'next',
            'href': '%s?%s' % (r.url('v2', collection),
                               urllib.parse.urlencode(sorted(query.items())))}]
    return body


def require(obj, resource, id):
    """``obj``, or 404 for the ``resource`` named ``id`` when it is None."""
    if obj is None:
        raise exception.ResourceNotFound(resource=resource, id=id)
    return obj


def json_response(status, body=None):
    resp = webob.Response(status=status, content_type='application/json',
                          charset='utf-8')
    if body is not None:
        resp.text = json.dumps(body)
    else:
        resp.content_type = None
        resp.body = b''
    return resp


class Text:
    """A handler's answer in a format other than JSON: ``text`` sent as
    ``content_type`` (UTF-8)."""

    def __init__(self, content_type, text):
        self.content_type = content_type
        self.text = text


def text_response(status, answer):
    resp = webob.Response(status=status, content_type=answer.content_type,
                          charset='utf-8')
    resp.text = answer.text
    return resp


def empty_response(status):
    return json_response(status, None)


def split_csv(value):
    """'a,b' -> ['a', 'b'] (empty items dropped)."""
    return [v.strip() for v in (value or '').split(',') if v.strip()]
