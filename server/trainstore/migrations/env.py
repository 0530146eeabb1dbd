"""Alembic's environment for the run store: run by server.trainstore.migrate on a connection it hands over
(config.attributes["connection"]), so no alembic.ini and no URL of its own."""

from __future__ import annotations

from alembic import context

from server.trainstore.tables import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
