"""How a round's clients run in the simulator: one after another (local.py) or as one
vectorized computation (batched.py), both through the client runtime. Flower's engine, which
sends the same tasks to SuperNodes, is fedlight.flower.engine."""
