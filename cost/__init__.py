"""Cost simulator: model + hardware + cluster + parallel configuration -> seconds, bytes, FLOPs.

Nothing here imports `formulations` or `solver`; data flows one way.
"""
