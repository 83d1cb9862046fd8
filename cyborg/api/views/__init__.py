"""Views: objects shaped exactly as Cyborg's API shows them (CONTRACT §4)."""


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
