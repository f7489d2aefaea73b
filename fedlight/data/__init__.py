"""Federated data: sources, partitioners, statistics and the ``FederatedDataModule``."""

from fedlight.data.datamodule import (
    ClientDataModule,
    FederatedDataModule,
    batches_per_epoch,
    iterate_batches,
)
from fedlight.data.partition import PARTITIONS, partition_labels, split_client
from fedlight.data.sources import SOURCES, SourceData, load_source

__all__ = [
    "ClientDataModule", "FederatedDataModule", "batches_per_epoch", "iterate_batches", "PARTITIONS",
    "partition_labels", "split_client", "SOURCES", "SourceData", "load_source",
]
