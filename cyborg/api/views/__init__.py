"""Views: objects shaped exactly as Cyborg's API shows them (CONTRACT §4)."""


def timestamp(value):
    """'2020-03-09T11:26:05+00:00' (UTC, no fraction), or None."""
    if value is None:
        return None
    return value.strftime('%Y-%m-%dT%H:%M:%S+00:00')


def links(r, collection, uuid):
    return [{'href': r.url('v2', collection, uuid), 'rel': 'self'},
            {'href': r.url(collection, uuid), 'rel': 'bookmark'}]
