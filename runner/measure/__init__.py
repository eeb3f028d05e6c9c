"""Measuring: the timing harness, least-squares fits, the machine's fingerprint and its
measured roof, and every timed decode placed on that roof."""
