"""A page's failed expectations (docs/quality.md): each one's name and reason, null on a valid page.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable without a default: PostgreSQL adds it without rewriting the table.
    with op.batch_alter_table("pages") as batch:
        batch.add_column(sa.Column("expectations", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pages") as batch:
        batch.drop_column("expectations")
