"""Views: objects shaped exactly as Cyborg's API shows them (the response
schemas in ``cyborg.api.schemas`` declare the same shapes)."""

from cyborg.api import microversion


def timestamp(value):
    """'2020-03-09T11:26:05+00:00' (UTC, no fraction), or None."""
    if value is None:
        return None
    return value.strftime('%Y-%m-%dT%H:%M:%S+00:00')


def links(r, collection, uuid):
    base = r.base_url
    return [{'href': '%s/v2/%s/%s' % (base, collection, uuid), 'rel': 'self'},
            {'href': '%s/%s/%s' % (base, collection, uuid),
             'rel': 'bookmark'}]


def add_health(r, body, obj):
    """From microversion 2.4: ``obj``'s health, reason and when it was
    last set, added to ``body``."""
    if r.version.matches(microversion.HEALTH):
        body['health'] = obj.health
        body['health_reason'] = obj.health_reason
        body['health_updated_at'] = timestamp(obj.health_updated_at)
    return body
