"""The decode impls (eager, static cache, compiled, the C++ fast path and its build),
speculative decoding's loop and its drafts."""
