"""The orchestrator: FederatedTrainer (trainer.py) drives a run built by build.py through the
round protocol (protocol.py); clients run through one client runtime (runtime.py) under an
engine (engines/); state stores, outputs, processes and server rules live in their packages.
See docs/architecture.md for the map."""
