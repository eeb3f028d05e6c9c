"""The experiment store: schema, engine, write/read API and job queue (SQLite or PostgreSQL)."""
