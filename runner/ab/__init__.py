"""`decodelab ab`: two revisions of decodelab measured interleaved on one machine (run.py), each
in its own worktree (revisions.py) and worker process (worker_main.py, protocol.py), in one
session (session.py)."""
