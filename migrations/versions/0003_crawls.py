"""Crawls have ids: a table of crawl records, and the crawl that stored each page.

Revision ID: 0004
Revises: 0003
Create Date: 2025-06-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "crawls",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("label", sa.Text(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("seeds", sa.JSON(), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("counts", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_crawls"),
    )
    op.create_index("ix_crawls_state", "crawls", ["state"])
    # A nullable column: an ALTER on both databases, no table rewrite; old rows are the default crawl's.
    op.add_column("pages", sa.Column("crawl_id", sa.String(64), nullable=True))
    op.create_index("ix_pages_crawl_id", "pages", ["crawl_id"])


def downgrade() -> None:
    with op.batch_alter_table("pages") as batch:
        batch.drop_index("ix_pages_crawl_id")
        batch.drop_column("crawl_id")
    op.drop_index("ix_crawls_state", table_name="crawls")
    op.drop_table("crawls")
