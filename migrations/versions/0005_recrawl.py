"""Keep each page's schedule: its validators, content signature, when it last changed, what its last
fetch found, its interval, when it is due next (indexed per domain), and its gone answers in a row.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_pages_domain_next_fetch_at"


def upgrade() -> None:
    # batch: SQLite cannot drop columns in place, and downgrade must work there too.
    with op.batch_alter_table("pages") as batch:
        batch.add_column(sa.Column("etag", sa.String(512), nullable=True))
        batch.add_column(sa.Column("last_modified", sa.String(64), nullable=True))
        batch.add_column(sa.Column("signature", sa.String(64), nullable=True))
        batch.add_column(sa.Column("changed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("found", sa.String(16), nullable=True))
        batch.add_column(sa.Column("fetch_interval", sa.Float(), nullable=True))
        batch.add_column(sa.Column("next_fetch_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("gone", sa.Integer(), nullable=False, server_default="0"))
    # Only scheduled rows are in it: the due query of a domain reads the index alone, in order.
    where = sa.text("next_fetch_at IS NOT NULL")
    op.create_index(INDEX, "pages", ["domain", "next_fetch_at"], postgresql_where=where, sqlite_where=where)


def downgrade() -> None:
    op.drop_index(INDEX, table_name="pages")
    with op.batch_alter_table("pages") as batch:
        for column in ("gone", "next_fetch_at", "fetch_interval", "found", "changed_at", "signature"):
            batch.drop_column(column)
        batch.drop_column("last_modified")
        batch.drop_column("etag")
