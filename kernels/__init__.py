"""Compute kernels for 3D neighborhood attention: torch and triton only."""
