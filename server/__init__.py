"""attnlab's web layer: FastAPI app, routes, schemas and settings."""
