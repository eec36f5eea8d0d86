"""`paraplan sweep`: many instances planned over local processes or a Dask cluster (run.py)."""
