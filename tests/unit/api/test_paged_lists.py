"""Paged lists (microversion 2.11) at the edges the gabbits cannot reach:
``[api]max_limit`` caps a page, asked for or not, and walking the links
visits every item once, in order."""

import urllib.parse

import webob

from tests.fixtures import api as api_fixture

ADMIN = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'admin',
         'X-User-Id': 'u1', 'OpenStack-API-Version': 'accelerator 2.11'}


def _get(service, path):
    req = webob.Request.blank(path)
    req.headers.update(ADMIN)
    resp = req.get_response(service.app)
    assert resp.status_int == 200, resp.text
    return resp.json


def _walk(service, path):
    """(uuids of every page, in order, pages read)."""
    uuids, pages = [], 0
    while path:
        body = _get(service, path)
        pages += 1
        uuids += [d['uuid'] for d in body['devices']]
        links = body.get('devices_links')
        path = None
        if links:
            url = urllib.parse.urlsplit(links[0]['href'])
            path = f'{url.path}?{url.query}'
    return uuids, pages


def test_max_limit_caps_every_page_and_the_links_visit_each_item_once():
    with api_fixture.api_service({('api', 'max_limit'): 2}) as service:
        seeded = [api_fixture.seed_device(service.engine, f'host{i}',
                                          f'host{i}_dev')['device_uuid']
                  for i in range(5)]
        whole = _get(service, '/v2/devices')
        assert [d['uuid'] for d in whole['devices']] == seeded[:2]
        assert 'marker=' + seeded[1] in whole['devices_links'][0]['href']
        asked = _get(service, '/v2/devices?limit=100')
        assert len(asked['devices']) == 2
        assert 'limit=2' in asked['devices_links'][0]['href']
        assert _walk(service, '/v2/devices') == (seeded, 3)
        assert _walk(service, '/v2/devices?limit=1') == (seeded, 5)
        # Exactly a page's worth: the last page has no link.
        assert _walk(service, f'/v2/devices?marker={seeded[0]}') == (
            seeded[1:], 2)
