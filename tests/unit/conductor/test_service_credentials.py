"""Glance reached with credentials that ``auth_section`` names
(keystoneauth reads the plugin and its options from that group): cyborg
looked at ``auth_type`` alone, so every FPGA programming was refused as
"no Glance is configured" (Nova's events: test_nova.py)."""

from keystoneauth1 import loading as ks_loading

from cyborg.conductor import glance as glance_client
from tests.fixtures import recording_http

fake_glance = recording_http.fake_glance


def _credentials_elsewhere(conf, group):
    ks_loading.register_auth_conf_options(conf, 'service_credentials')
    conf.set_override('auth_type', 'none', group='service_credentials')
    conf.set_override('auth_section', 'service_credentials', group=group)


def test_glance_credentials_in_another_section(conf, fake_glance):
    _credentials_elsewhere(conf, 'glance')
    conf.set_override('endpoint_override', fake_glance.url, group='glance')
    image = fake_glance.add_image(b'bits' * 10)
    assert glance_client.get_image(conf, image, 'p1')['id'] == image

