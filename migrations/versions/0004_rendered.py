"""Record whether a page was rendered by a browser (render_js) before it was parsed.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # batch: SQLite cannot drop columns in place, and downgrade must work there too.
    with op.batch_alter_table("pages") as batch:
        batch.add_column(sa.Column("rendered", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("pages") as batch:
        batch.drop_column("rendered")
