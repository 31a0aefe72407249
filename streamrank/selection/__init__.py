"""Feature selection for ranking (paper 003, GAS)."""
