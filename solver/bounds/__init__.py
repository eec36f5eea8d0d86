"""Lower bounds of the planner's search (solver/search.py), from the cheapest to read to
the tightest, each at most the next:

- unpriced.py: every outer configuration before it is priced, from per-group layer-time floors
  (the planner prices configurations in this order and stops where it reaches the incumbent);
- batched.py: every priced configuration at once, over its classes, scenarios and micro-batch
  vectors, memory ignored (the search's keys);
- one_class.py: one class's split problem from its coefficients, with memory and the recompute
  it forces (tight_lower_bound_s), memory-infeasibility proofs and quick incumbents.
"""
