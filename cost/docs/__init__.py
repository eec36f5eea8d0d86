"""The generators of docs/'s generated regions (regions.py); they read only cost/:
`python -m paraplan.cost.docs.schema` and `python -m paraplan.cost.docs.accuracy`."""
