"""``openstack accelerator arq allocate``: standalone allocation
(``POST /v2/accelerator_requests/{uuid}/allocate``, microversion 2.6).

It calls through openstacksdk's accelerator proxy, the keystoneauth
session python-openstackclient built from the command line (catalog,
region, interface, TLS options and all), asking for the microversion it
needs.
"""

import json

from osc_lib.command import command
from osc_lib import exceptions

# The microversion that brought the call.
MICROVERSION = '2.6'


def _fault(response):
    """The message of a cyborg error body, or the body itself."""
    try:
        return json.loads(response.json()['error_message'])['faultstring']
    except (ValueError, KeyError, TypeError):
        return response.text[:500]


class AllocateAcceleratorRequest(command.ShowOne):
    """Allocate an accelerator to an accelerator request, without Nova.

    Placement is asked for a free accelerator matching the request's
    device profile group; one is claimed with the request as consumer and
    bound.  Deleting the request releases it.  Admins and services only.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument(
            'uuid', metavar='<uuid>',
            help='UUID of the accelerator request (state Initial or '
                 'Unbound).')
        parser.add_argument(
            '--consumer-id', metavar='<consumer-id>', required=True,
            help='Who holds the accelerator (a pod\'s uid, a job id).')
        parser.add_argument(
            '--consumer-type', metavar='<consumer-type>', required=True,
            help='What kind of consumer that is (e.g. k8s-pod).')
        parser.add_argument(
            '--host', metavar='<hostname>',
            help='Only an accelerator of this host.')
        return parser

    def take_action(self, parsed_args):
        proxy = self.app.client_manager.sdk_connection.accelerator
        body = {'consumer_id': parsed_args.consumer_id,
                'consumer_type': parsed_args.consumer_type}
        # Sent whenever given, even empty: the API refuses an empty one
        # (400), where leaving it out would allocate on any host.
        if parsed_args.host is not None:
            body['hostname'] = parsed_args.host
        response = proxy.post(
            '/accelerator_requests/%s/allocate' % parsed_args.uuid,
            json=body, microversion=MICROVERSION, raise_exc=False)
        if response.status_code >= 400:
            raise exceptions.CommandError(
                'Allocating accelerator request %s failed (HTTP %d): %s' % (
                    parsed_args.uuid, response.status_code,
                    _fault(response)))
        arq = response.json()
        columns = sorted(key for key in arq if key != 'links')
        return columns, [_shown(arq[key]) for key in columns]


def _shown(value):
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return value
