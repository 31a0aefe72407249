"""Workflows over many trainings: grids, LETOR cross-validation, plots and the run report."""
