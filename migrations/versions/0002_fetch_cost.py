"""Record each page's fetch cost: the credits charged and the exit (proxy) id that carried it.

Revision ID: 0002
Revises: 0001
Create Date: 2025-02-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # batch: SQLite cannot drop columns in place, and downgrade must work there too.
    with op.batch_alter_table("pages") as batch:
        batch.add_column(sa.Column("credits", sa.Float(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("exit_id", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pages") as batch:
        batch.drop_column("exit_id")
        batch.drop_column("credits")
