"""Each domain's pause and back-off, kept where a Redis loss cannot reach them (`domain_state`).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "domain_state",
        sa.Column("domain", sa.String(253), nullable=False),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("backoff_factor", sa.Float(), nullable=True),
        sa.Column("backoff_at", sa.Float(), nullable=True),
        sa.Column("held_until", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("domain", name="pk_domain_state"),
    )


def downgrade() -> None:
    op.drop_table("domain_state")
