"""Blocks kept on disk between passes: mapped features and the kernel matrix."""
