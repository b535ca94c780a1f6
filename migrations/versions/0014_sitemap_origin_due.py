"""When the host layout's scheduler looks at a sitemap origin next (docs/recrawl.md): each origin's
own, so an origin of a domain with a longer `recrawl.every` never stands before one that is due.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sitemap_origins") as batch:
        batch.add_column(sa.Column("due_at", sa.DateTime(timezone=True), nullable=True))
    # Looked at on the next pass, which sets each one's own time from its domain's interval.
    op.execute("UPDATE sitemap_origins SET due_at = round_at")
    with op.batch_alter_table("sitemap_origins") as batch:
        batch.alter_column("due_at", existing_type=sa.DateTime(timezone=True), nullable=False)
    op.create_index("ix_sitemap_origins_due_at", "sitemap_origins", ["due_at"])


def downgrade() -> None:
    op.drop_index("ix_sitemap_origins_due_at", table_name="sitemap_origins")
    with op.batch_alter_table("sitemap_origins") as batch:
        batch.drop_column("due_at")
