"""The graph IR: SSA ops with static shapes, regions for loops and conditionals; its printer,
verifier, interpreter (NumPy references) and passes."""
