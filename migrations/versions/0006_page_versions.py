"""Keep each page's history: `page_versions` (one row per version of a page) and `pages.version`,
the number of its newest.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "page_versions",
        sa.Column("id", ID, autoincrement=True),
        sa.Column("page_id", ID, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("fetched_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("signature", sa.String(64), nullable=True),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("data", sa.JSON(), nullable=True),
        sa.Column("crawl_id", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_page_versions"),
        sa.ForeignKeyConstraint(
            ["page_id"], ["pages.id"], name="fk_page_versions_page_id_pages", ondelete="CASCADE"
        ),
        sa.UniqueConstraint("page_id", "version", name="uq_page_versions_page_id_version"),
    )
    # --changed-since and pruning by age read versions by time.
    op.create_index("ix_page_versions_fetched_at", "page_versions", ["fetched_at"])
    with op.batch_alter_table("pages") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pages") as batch:
        batch.drop_column("version")
    op.drop_index("ix_page_versions_fetched_at", table_name="page_versions")
    op.drop_table("page_versions")
