"""nova_events(batch_id) index

Revision ID: d5f8b2a4c6e1
Revises: b7e1d3f5a9c2
Create Date: 2026-11-29 17:00:00

Every read and write of a batch of Nova events names it by ``batch_id``
(read it, claim it, postpone it, forget it).  Without an index each
scanned the whole table, and on MariaDB an UPDATE or DELETE locks every
row it scans: while events piled up (Nova away), delivering one batch
waited for the transactions of every bind recording its own.  An index:
the previous release runs on the expanded schema unchanged.
"""

from cyborg.db import migration


revision = 'd5f8b2a4c6e1'
down_revision = 'b7e1d3f5a9c2'
branch_labels = None
depends_on = None


def upgrade():
    migration.create_index('nova_events_batch_id_idx', 'nova_events',
                           ['batch_id'])
