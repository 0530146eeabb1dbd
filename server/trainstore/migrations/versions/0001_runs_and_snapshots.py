"""Runs and their snapshots.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "train_runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("stop_requested", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_index("ix_train_runs_status", "train_runs", ["status"])
    op.create_table(
        "train_snapshots",
        sa.Column("run_id", sa.String(32), sa.ForeignKey("train_runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("step", sa.Integer(), primary_key=True),
        sa.Column("measures", sa.JSON(), nullable=False),
        sa.Column("directory", sa.String(400), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("train_snapshots")
    op.drop_index("ix_train_runs_status", "train_runs")
    op.drop_table("train_runs")
