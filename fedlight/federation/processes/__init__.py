"""The processes of a run: Fabric and its launchers, collectives and ownership of clients,
CPU sensing, stop signals."""
