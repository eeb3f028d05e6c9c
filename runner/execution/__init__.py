"""Running a sweep into the store: the run path, the worker, and how runs and jobs end."""
