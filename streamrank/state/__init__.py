"""Model and checkpoint files."""
