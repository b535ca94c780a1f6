"""Sitemaps: `sitemaps` (each file as its last reading found it) and `sitemap_origins` (the origins
whose sitemaps are read in rounds).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "sitemaps",
        sa.Column("id", ID, autoincrement=True),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("domain", sa.String(253), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(16), nullable=True),
        sa.Column("etag", sa.String(512), nullable=True),
        sa.Column("last_modified", sa.String(64), nullable=True),
        sa.Column("signature", sa.String(64), nullable=True),
        sa.Column("counts", sa.JSON(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_sitemaps"),
        sa.UniqueConstraint("url", name="uq_sitemaps_url"),
    )
    op.create_index("ix_sitemaps_domain", "sitemaps", ["domain"])
    op.create_table(
        "sitemap_origins",
        sa.Column("origin", sa.String(300), nullable=False),
        sa.Column("domain", sa.String(253), nullable=False),
        sa.Column("crawl_id", sa.String(64), nullable=True),
        sa.Column("round_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("origin", name="pk_sitemap_origins"),
    )
    op.create_index("ix_sitemap_origins_domain", "sitemap_origins", ["domain"])


def downgrade() -> None:
    op.drop_index("ix_sitemap_origins_domain", table_name="sitemap_origins")
    op.drop_table("sitemap_origins")
    op.drop_index("ix_sitemaps_domain", table_name="sitemaps")
    op.drop_table("sitemaps")
