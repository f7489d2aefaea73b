"""Where clients' state lives between rounds: in this process (memory, or one memory-mapped
file on disk) and, for a Flower SuperNode, in per-round files on the node's disk."""
