"""Reverse-mode automatic differentiation: vjp rules applied over recorded ops (GradientTape)."""
