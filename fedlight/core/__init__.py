"""Contracts shared by every part of fedlight; this package imports nothing else of fedlight.

client.py (phases, uploads, a client's context, shared / private partitions), rules.py (the
server-rule contract and weighted sums), messages.py (a round's tasks, results, failures and
scores, and the engine protocol), seeding.py (every random draw from (seed, round, client)),
noise.py (the counter-based noise a training step draws, keyed per client), errors.py (user
errors), files.py (the one atomic file write, and a CSV cell read back as a number), host.py
(the machine's cores).
"""
