"""The WARC archive: where each page's latest answer is (`pages.warc_*`), and the runs of `crawler
reparse` (`reparses`).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("pages") as batch:
        batch.add_column(sa.Column("warc_file", sa.String(255), nullable=True))
        batch.add_column(sa.Column("warc_offset", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("warc_length", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("warc_digest", sa.String(64), nullable=True))
        batch.add_column(sa.Column("warc_date", sa.String(32), nullable=True))
    op.create_table(
        "reparses",
        sa.Column("id", ID, autoincrement=True),
        sa.Column("filters", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_page_id", ID, server_default="0", nullable=False),
        sa.Column("pages", sa.Integer(), server_default="0", nullable=False),
        sa.Column("changed", sa.Integer(), server_default="0", nullable=False),
        sa.Column("failed", sa.Integer(), server_default="0", nullable=False),
        sa.Column("links", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_reparses"),
    )


def downgrade() -> None:
    op.drop_table("reparses")
    with op.batch_alter_table("pages") as batch:
        for name in ("warc_date", "warc_digest", "warc_length", "warc_offset", "warc_file"):
            batch.drop_column(name)
