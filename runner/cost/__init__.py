"""decodelab's cost model, one home :

- ``counts``: exact multiplication counts, the one counter and the closed forms beside it
  (standard library only: the context-cost contract imports it without torch);
- ``roofline_model``: what a decode pass costs on the roofline (bytes, flops, working set,
  regime, predicted time);
- ``speculative``: the speculative speedup formulas (the write-ups', the component model, the
  a-priori prediction's, the roofline's speedup and break-even acceptance);
- ``overhead_fit``: the per-step fit seconds = a + b · multiplications, as a type;
- ``estimates``: what a sweep will cost before it runs (the validator's time and memory limits,
  the launch estimate's per-case seconds and training).

Importing this package imports nothing: each module is imported by name.
"""
