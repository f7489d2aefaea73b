"""Federated data: sources, partitions, statistics and the ``FederatedDataModule``."""

from fedlight.data.datamodule import (
    ClientDataModule,
    FederatedDataModule,
    SampleCaps,
    batches_per_epoch,
    iterate_batches,
)
from fedlight.data.partitions import PARTITIONS, Partition, split_client
from fedlight.data.sources import SOURCES, Source, SourceData

__all__ = [
    "ClientDataModule", "FederatedDataModule", "PARTITIONS", "Partition", "SOURCES",
    "SampleCaps", "Source", "SourceData", "batches_per_epoch", "iterate_batches",
    "split_client",
]
