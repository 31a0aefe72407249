"""How passes over the data are run: the executor seam and its local implementation."""
