"""Ranking metrics (LETOR conventions) and score files."""
