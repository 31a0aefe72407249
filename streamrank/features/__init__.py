"""Rows to features: normalisation, kernels, feature maps and their registry."""
