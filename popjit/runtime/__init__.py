"""Execution: virtual devices, compiled executables, eager ops on the IPU, flags."""
