"""Partitions: disjoint, seeded, the promised shape per scheme, clear errors otherwise."""

import numpy as np
import pytest

from fedlight.data import FederatedDataModule, SampleCaps
from fedlight.data.partitions import PARTITIONS, as_partition, split_client
from fedlight.data.partitions.dirichlet import Dirichlet

NUM_CLASSES = 10
# 1000 samples, 100 per class, in a shuffled order
LABELS = np.random.default_rng(123).permutation(np.repeat(np.arange(NUM_CLASSES), 100))
LABEL_SCHEMES = ["iid", "dirichlet", "pathological", "shards", "incomplete"]


def partition_labels(name: str, labels, num_clients, seed: int, domains=None, groups=None,
                     **options) -> list[np.ndarray]:
    """The split of the scheme named ``name`` with its options."""
    return PARTITIONS[name](**options).split(labels, num_clients, seed, domains=domains,
                                             groups=groups)


def classes_of(part: np.ndarray, labels: np.ndarray = LABELS) -> set[int]:
    return set(np.unique(labels[part]).tolist())


def assert_valid(parts: list[np.ndarray], num_clients: int, n: int) -> None:
    assert len(parts) == num_clients
    for p in parts:
        assert p.dtype == np.int64 and p.ndim == 1 and len(p) > 0
        assert np.all(np.diff(p) > 0)  # sorted, no repeats
        assert p.min() >= 0 and p.max() < n
    everything = np.concatenate(parts)
    assert len(np.unique(everything)) == len(everything)  # disjoint


def test_registry_lists_every_scheme() -> None:
    # a scheme defined elsewhere (tests/test_partition_plugin.py) registers too
    shipped = {name: cls for name, cls in PARTITIONS.items()
               if cls.__module__.startswith("fedlight.data.partitions.")}
    assert set(shipped) == {"iid", "dirichlet", "pathological", "shards", "incomplete",
                            "domains", "natural", "file"}
    assert {cls.__name__ for cls in shipped.values()} == {
        "IID", "Dirichlet", "Pathological", "Shards", "Incomplete", "Domains", "Natural",
        "FromFile"}


def test_a_mapping_names_a_partition_by_class_name_or_path() -> None:
    short = as_partition({"class_path": "Dirichlet", "init_args": {"beta": 0.3}})
    full = as_partition(Dirichlet(beta=0.3).record())
    assert isinstance(short, Dirichlet) and short.options() == full.options() == {
        "beta": 0.3, "min_client_size": 10}
    with pytest.raises(ValueError, match=r"unknown data.partition class 'Dirichelt'; valid: "):
        as_partition({"class_path": "Dirichelt"})


@pytest.mark.parametrize("name", LABEL_SCHEMES)
def test_disjoint_and_full_coverage(name: str) -> None:
    parts = partition_labels(name, LABELS, 20, seed=0)
    assert_valid(parts, 20, len(LABELS))
    assert sum(len(p) for p in parts) == len(LABELS)


@pytest.mark.parametrize("name", LABEL_SCHEMES)
def test_same_seed_same_result_other_seed_differs(name: str) -> None:
    first = partition_labels(name, LABELS, 20, seed=7)
    again = partition_labels(name, LABELS, 20, seed=7)
    other = partition_labels(name, LABELS, 20, seed=8)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_accepts_any_integer_label_array() -> None:
    parts = partition_labels("iid", LABELS.astype(np.int32).tolist(), 4, seed=0)
    assert_valid(parts, 4, len(LABELS))


def test_iid_sizes_differ_by_at_most_one() -> None:
    sizes = [len(p) for p in partition_labels("iid", LABELS[:997], 10, seed=0)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 997


@pytest.mark.parametrize("seed", range(5))
def test_dirichlet_respects_min_client_size(seed: int) -> None:
    parts = partition_labels("dirichlet", LABELS, 20, seed, beta=0.1, min_client_size=12)
    assert min(len(p) for p in parts) >= 12


def test_dirichlet_beta_controls_skew() -> None:
    skewed = partition_labels("dirichlet", LABELS, 10, seed=0, beta=0.05)
    uniform = partition_labels("dirichlet", LABELS, 10, seed=0, beta=1000.0)
    assert np.mean([len(classes_of(p)) for p in skewed]) < 5
    assert all(len(classes_of(p)) == NUM_CLASSES for p in uniform)


@pytest.mark.parametrize(("num_clients", "k"), [(20, 2), (7, 3), (10, 10), (3, 1)])
def test_pathological_gives_exactly_k_classes(num_clients: int, k: int) -> None:
    parts = partition_labels("pathological", LABELS, num_clients, 0, classes_per_client=k)
    assert_valid(parts, num_clients, len(LABELS))
    assert all(len(classes_of(p)) == k for p in parts)
    usage = np.bincount([c for p in parts for c in classes_of(p)], minlength=NUM_CLASSES)
    assert usage.max() - usage.min() <= 1  # classes used as evenly as possible


def test_pathological_splits_each_class_evenly() -> None:
    parts = partition_labels("pathological", LABELS, 20, seed=0, classes_per_client=2)
    for c in range(NUM_CLASSES):
        shares = [int(np.sum(LABELS[p] == c)) for p in parts if c in classes_of(p)]
        assert max(shares) - min(shares) <= 1 and sum(shares) == 100


def test_unbalanced_pathological_draws_pfllibs_random_shares() -> None:
    # 20 clients x 2 classes: each class held by 4 clients, 100 / 4 = 25 samples on average;
    # PFLlib's draw for all holders but the last: [max(25 / 10, int(min(40, 25)) / 10), 25)
    parts = partition_labels("pathological", LABELS, 20, seed=0, classes_per_client=2,
                             balanced=False)
    assert_valid(parts, 20, len(LABELS))
    assert sum(len(p) for p in parts) == len(LABELS)
    assert all(len(classes_of(p)) == 2 for p in parts)
    spreads = []
    for c in range(NUM_CLASSES):
        shares = [int(np.sum(LABELS[p] == c)) for p in parts if c in classes_of(p)]
        assert len(shares) == 4 and sum(shares) == 100
        assert sum(2 <= s < 25 for s in shares) >= 3  # the drawn ones; the last takes the rest
        spreads.append(max(shares) - min(shares))
    assert max(spreads) > 10  # unequal, unlike the balanced split
    again = partition_labels("pathological", LABELS, 20, seed=0, classes_per_client=2,
                             balanced=False)
    other = partition_labels("pathological", LABELS, 20, seed=1, classes_per_client=2,
                             balanced=False)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    assert any(len(a) != len(b) for a, b in zip(parts, other, strict=True))


def test_unbalanced_pathological_splits_a_class_too_small_to_draw_evenly() -> None:
    labels = np.repeat(np.arange(2), 3)  # 3 samples per class, 2 holders: nothing to draw
    parts = partition_labels("pathological", labels, 4, seed=0, classes_per_client=1,
                             balanced=False)
    assert sorted(len(p) for p in parts) == [1, 1, 2, 2]


def test_shards_give_each_client_its_shards() -> None:
    # 40 shards of 25 samples; each class holds 4 whole shards
    parts = partition_labels("shards", LABELS, 20, seed=0, shards_per_client=2)
    assert all(len(p) == 50 for p in parts)
    assert all(len(classes_of(p)) <= 2 for p in parts)


def test_shards_allow_sizes_that_do_not_divide() -> None:
    parts = partition_labels("shards", LABELS[:997], 10, seed=0, shards_per_client=3)
    sizes = [len(p) for p in parts]
    assert sum(sizes) == 997 and max(sizes) - min(sizes) <= 3


@pytest.mark.parametrize("seed", range(3))
def test_incomplete_gives_two_to_all_classes(seed: int) -> None:
    parts = partition_labels("incomplete", LABELS, 20, seed, min_client_size=5)
    counts = [len(classes_of(p)) for p in parts]
    assert all(2 <= k <= NUM_CLASSES for k in counts)
    assert len(set(counts)) > 1  # the number of classes varies between clients
    assert set().union(*(classes_of(p) for p in parts)) == set(range(NUM_CLASSES))
    assert min(len(p) for p in parts) >= 5


def test_incomplete_sizes_follow_size_sigma() -> None:
    def spread(sigma: float) -> float:
        parts = partition_labels("incomplete", LABELS, 10, 0, size_sigma=sigma)
        sizes = np.array([len(p) for p in parts])
        per_class = sizes / np.array([len(classes_of(p)) for p in parts])
        return float(per_class.std() / per_class.mean())

    assert spread(0.0) < spread(1.0)


DOMAINS = np.arange(len(LABELS)) % 3  # three domains of 334, 333, 333 samples


@pytest.mark.parametrize("num_clients", [3, 6, 9])
def test_domains_one_domain_per_client(num_clients: int) -> None:
    parts = partition_labels("domains", LABELS, num_clients, seed=0, domains=DOMAINS)
    assert_valid(parts, num_clients, len(LABELS))
    assert sum(len(p) for p in parts) == len(LABELS)
    per_domain = num_clients // 3
    for i, p in enumerate(parts):
        assert set(DOMAINS[p].tolist()) == {i // per_domain}


GROUPS = np.random.default_rng(7).integers(0, 50, len(LABELS))  # 50 writers, uneven sizes


def test_natural_gives_each_client_one_whole_group() -> None:
    parts = partition_labels("natural", LABELS, 50, seed=0, groups=GROUPS)
    assert_valid(parts, 50, len(LABELS))
    assert sum(len(p) for p in parts) == len(LABELS)
    for i, p in enumerate(parts):
        assert set(GROUPS[p].tolist()) == {i}
        assert len(p) == np.sum(GROUPS == i)


def test_natural_samples_groups_with_the_seed() -> None:
    def chosen(seed: int) -> list[int]:
        parts = partition_labels("natural", LABELS, 12, seed=seed, groups=GROUPS)
        assert_valid(parts, 12, len(LABELS))
        owners = [np.unique(GROUPS[p]) for p in parts]
        assert all(len(o) == 1 for o in owners)  # whole groups, one per client
        assert all(len(p) == np.sum(GROUPS == o[0]) for p, o in zip(parts, owners, strict=True))
        return [int(o[0]) for o in owners]

    assert chosen(0) == chosen(0)
    assert chosen(0) != chosen(1)
    assert len(set(chosen(0))) == 12


@pytest.mark.parametrize(
    ("name", "num_clients", "options", "match"),
    [
        ("iid", 0, {}, r"num_clients=0"),
        ("iid", 2.5, {}, r"num_clients=2\.5"),
        ("iid", 1001, {}, r"num_clients=1001 exceeds the 1000 samples"),
        ("dirichlet", 10, {"beta": 0.0}, r"beta=0\.0"),
        ("dirichlet", 10, {"beta": -1.0}, r"beta=-1\.0"),
        ("dirichlet", 10, {"min_client_size": 101}, r"min_client_size=101"),
        ("dirichlet", 10, {"min_client_size": -1}, r"min_client_size=-1"),
        ("dirichlet", 100, {"beta": 0.01, "min_client_size": 9}, r"beta=0\.01.*min_client_size"),
        ("pathological", 10, {"classes_per_client": 11}, r"classes_per_client=11.*1\.\.10"),
        ("pathological", 10, {"classes_per_client": 0}, r"classes_per_client=0"),
        ("shards", 10, {"shards_per_client": 0}, r"shards_per_client=0"),
        ("shards", 500, {"shards_per_client": 3}, r"1500 shards exceeds the 1000 samples"),
        ("incomplete", 10, {"size_sigma": -0.5}, r"size_sigma=-0\.5"),
        ("incomplete", 100, {"min_client_size": 30}, r"min_client_size=30"),
        ("domains", 10, {}, r"no domains; valid partitions for it: dirichlet, file, iid, "
                            r"incomplete, pathological, shards"),
        ("domains", 4, {"domains": DOMAINS}, r"num_clients=4.*multiple of 3"),
        ("domains", 3, {"domains": DOMAINS[:10]}, r"one domain id per sample"),
        ("natural", 10, {}, r"no groups; valid partitions for it: dirichlet, .*shards"),
        ("natural", 51, {"groups": GROUPS}, r"num_clients=51 exceeds the 50 groups.*at most 50"),
        ("natural", 3, {"groups": GROUPS[:10]}, r"one group id per sample"),
    ],
)
def test_impossible_settings_name_the_bad_value(
    name: str, num_clients: int, options: dict, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        partition_labels(name, LABELS, num_clients, seed=0, **options)


def test_bad_labels_are_rejected() -> None:
    with pytest.raises(ValueError, match="1-D integer"):
        partition_labels("iid", LABELS.reshape(10, 100), 2, seed=0)
    with pytest.raises(ValueError, match="1-D integer"):
        partition_labels("iid", LABELS.astype(float), 2, seed=0)


def test_class_too_small_for_its_clients() -> None:
    labels = np.array([0] * 50 + [1])  # class 1 has one sample
    with pytest.raises(ValueError, match="class 1 has 1 samples"):
        partition_labels("pathological", labels, 10, seed=0, classes_per_client=1)
    with pytest.raises(ValueError, match="at least 2 classes"):
        partition_labels("incomplete", np.zeros(50, np.int64), 5, seed=0)


def test_empty_client_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"no samples.*num_clients=200"):
        partition_labels("dirichlet", LABELS, 200, seed=0, beta=0.01, min_client_size=0)


@pytest.mark.parametrize(("n", "fraction", "n_train"), [(8, 0.75, 6), (10, 0.5, 5), (3, 0.1, 1)])
def test_split_client_sizes(n: int, fraction: float, n_train: int) -> None:
    indices = np.arange(100, 100 + n)
    train, test = split_client(indices, fraction, np.random.default_rng(0))
    assert len(train) == n_train and len(test) == n - n_train
    assert np.array_equal(np.sort(np.concatenate([train, test])), indices)
    assert train.dtype == test.dtype == np.int64


def test_split_client_is_seeded_and_shuffles() -> None:
    indices = np.arange(1000)
    a = split_client(indices, 0.75, np.random.default_rng(1))
    b = split_client(indices, 0.75, np.random.default_rng(1))
    c = split_client(indices, 0.75, np.random.default_rng(2))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])
    assert not np.array_equal(a[0], indices[:750])  # not just the first 75 %


def test_split_client_edges() -> None:
    rng = np.random.default_rng(0)
    train, test = split_client(np.arange(5), 1.0, rng)
    assert len(train) == 5 and len(test) == 0
    train, test = split_client(np.array([4]), 0.5, rng)
    assert train.tolist() == [4] and len(test) == 0
    train, test = split_client(np.array([], np.int64), 0.75, rng)
    assert len(train) == len(test) == 0


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_split_client_rejects_bad_fraction(fraction: float) -> None:
    with pytest.raises(ValueError, match=f"train_fraction={fraction}"):
        split_client(np.arange(10), fraction, np.random.default_rng(0))


def test_max_client_samples_caps_each_client_in_proportion():
    options = dict(partition=Dirichlet(beta=0.5), num_clients=10, seed=0)
    full = FederatedDataModule(**options)
    capped = FederatedDataModule(**options, caps=SampleCaps(client_samples=50))
    full.setup()
    capped.setup()
    cut = 0
    for whole, part in zip(full.splits, capped.splits, strict=True):
        total = len(whole.train) + len(whole.test)
        assert len(part.train) + len(part.test) == min(50, total)
        assert set(part.train) <= set(whole.train) and set(part.test) <= set(whole.test)
        if total > 50:
            cut += 1
            assert abs(len(part.train) / 50 - len(whole.train) / total) <= 0.02
    assert cut > 0
    with pytest.raises(ValueError, match="caps.client_samples must be at least 2"):
        FederatedDataModule(**options, caps={"client_samples": 1})
