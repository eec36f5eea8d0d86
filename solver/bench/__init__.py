"""`paraplan bench`: the solver against exhaustive search on a ladder of instances (ladder.py)
and mixed-cluster optima against the plans a user would otherwise pick (mixed.py)."""
