"""Scripts that run on the managed host: Python standard library only."""
