"""What a run writes: its folder (metrics, summary, plots), its loggers, its checkpoints (one
atomic write, fedlight.core.files), the progress bar and the closing table."""
