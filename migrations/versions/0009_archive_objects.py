"""Archives in object storage: `pages.warc_file` holds an object's URL (s3://bucket/prefix/name), longer
than a file name, so it takes up to 1024 characters (S3's own limit on a key).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("pages") as batch:
        batch.alter_column("warc_file", type_=sa.String(1024), existing_type=sa.String(255))


def downgrade() -> None:
    with op.batch_alter_table("pages") as batch:
        batch.alter_column("warc_file", type_=sa.String(255), existing_type=sa.String(1024))
