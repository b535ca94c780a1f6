"""A version's content: the page's content columns on `page_versions`, for the change feed.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ("markdown", sa.Text()),
    ("text", sa.Text()),
    ("lang", sa.String(16)),
    ("simhash", sa.String(16)),
    ("near_duplicate_of", sa.Text()),
    ("content_refused", sa.String(32)),
)


def upgrade() -> None:
    # Nullable columns without defaults: PostgreSQL adds them without rewriting the table.
    with op.batch_alter_table("page_versions") as batch:
        for name, type_ in COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("page_versions") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
