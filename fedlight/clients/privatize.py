"""Where to privatize: block strings such as ``"AaBb"`` over a backbone's block cut.

Li, Gan, Zhan, Shao, Li, Song, "Aggregate or Not? Exploring Where to Privatize in DNN Based
Federated Learning Under Different Non-IID Scenes", arXiv:2107.11954 (2021), Sec. 4.1-4.2.

A backbone is cut into ``L`` sequential blocks A, B, C, ... (bottom first; ``cut="coarse"`` is
encoder + head for every backbone, ``cut="fine"`` the six blocks of VGG11). A *privatization
way* is a string with one letter group per block, in order: the uppercase letter is a shared
copy of the block (aggregated by the server), the lowercase letter a private copy (kept by the
client); a block may have both (``"Aa"``, shared first). With ``L = 2``: ``"AB"`` is FedAvg,
``"ab"`` local training, ``"aB"`` a private encoder, ``"Ab"`` a private classifier (FedPer),
``"AaB"`` a double encoder, ``"ABb"`` a double classifier, ``"AaBb"`` two full branches.

:func:`ps_way`, :func:`sp_way`, :func:`sps_way` and :func:`ssp_way` write the paper's four
families (Def. 4.3) for a split point ``b``; :func:`parse_way` checks a string.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError
from fedlight.models import Backbone, build_backbone

COMBINES = ("mean", "product")
_LETTERS = string.ascii_uppercase


# ===================================================================== privatization strings
def parse_way(way: str, block_names: Sequence[str]) -> list[tuple[bool, bool]]:
    """Read a privatization string into ``(shared, private)`` flags, one pair per block.

    Args:
        way: e.g. ``"AaB"``; block ``k`` is written as its letter in uppercase (shared copy),
            lowercase (private copy) or both, uppercase first, blocks in order A, B, C, ...
        block_names: the blocks of the cut, bottom first (used for the length and messages).

    Returns:
        ``[(has_shared_copy, has_private_copy), ...]`` of length ``len(block_names)``.

    Raises:
        ValueError: the string is malformed; the message shows it and a valid example for
            this number of blocks.
    """
    count = len(block_names)
    if not 1 <= count <= len(_LETTERS):
        raise ConfigError(f"privatization strings cover 1 to 26 blocks, got {count}")
    reason = _why_invalid(way, count) if isinstance(way, str) else "it is not a string"
    if reason is None:
        copies, position = [], 0
        for index in range(count):
            upper = way[position:position + 1] == _LETTERS[index]
            position += upper
            lower = way[position:position + 1] == _LETTERS[index].lower()
            position += lower
            copies.append((upper, lower))
        return copies
    last = _LETTERS[count - 1]
    examples = (f'"{sps_way(count, 2)}" or "{ssp_way(count, count)}"' if count > 1
                else '"A", "a" or "Aa"')
    shown = f'"{way}"' if isinstance(way, str) else repr(way)
    raise ConfigError(
        f"invalid privatization {shown} for a {count}-block backbone ({', '.join(block_names)}): "
        f"blocks must appear in order A..{last}, each as upper (shared) and/or lower (private) "
        f"case, e.g. {examples} ({reason})"
    )


def _why_invalid(way: str, count: int) -> str | None:
    """The first problem of ``way`` for ``count`` blocks, or ``None`` when it is valid."""
    if not way:
        return "the string is empty"
    position = 0
    for index in range(count):
        upper, lower = _LETTERS[index], _LETTERS[index].lower()
        found = way[position:position + 1]
        if found == upper:
            position += 1
            if way[position:position + 1] == lower:
                position += 1
        elif found == lower:
            position += 1
            if way[position:position + 1] == upper:
                return f"write the shared copy first: {upper}{lower}, not {lower}{upper}"
        elif not found:
            return f"block {upper} is missing: the string covers {index} of {count} blocks"
        else:
            return f"expected {upper} and/or {lower} at position {position + 1}, got {found!r}"
    if position < len(way):
        extra = way[position]
        if extra.isalpha() and extra.upper() in _LETTERS[count:]:
            return f"{extra!r} names a block beyond the {count} of this cut"
        return f"unexpected {extra!r} at position {position + 1}"
    return None


def _check_split(num_blocks: int, b: int) -> None:
    if not 1 <= num_blocks <= len(_LETTERS):
        raise ConfigError(f"num_blocks must be in 1..26, got {num_blocks}")
    if not 1 <= b <= num_blocks:
        raise ConfigError(f"split point b must be in 1..{num_blocks} (1-based, as the paper), "
                         f"got {b}")


def ps_way(num_blocks: int, b: int) -> str:
    """Private-shared (PS): the blocks below block ``b`` (1-based) private, the others shared.

    ``ps_way(2, 2) == "aB"``; ``b = 1`` gives the all-shared ``"AB..."``.
    """
    _check_split(num_blocks, b)
    return "".join(c.lower() if i < b - 1 else c for i, c in enumerate(_LETTERS[:num_blocks]))


def sp_way(num_blocks: int, b: int) -> str:
    """Shared-private (SP): block ``b`` and the ones above private, the ones below shared.

    ``sp_way(3, 3) == "ABc"``; ``b = 1`` gives local training ``"ab..."``.
    """
    _check_split(num_blocks, b)
    return "".join(c.lower() if i >= b - 1 else c for i, c in enumerate(_LETTERS[:num_blocks]))


def sps_way(num_blocks: int, b: int) -> str:
    """Shared-private-shared (SPS): a complete shared model plus private copies of the blocks
    below block ``b``. ``sps_way(5, 4) == "AaBbCcDE"``; ``b = 1`` adds no copy."""
    _check_split(num_blocks, b)
    return "".join(c + c.lower() if i < b - 1 else c
                   for i, c in enumerate(_LETTERS[:num_blocks]))


def ssp_way(num_blocks: int, b: int) -> str:
    """Shared-shared-private (SSP): a complete shared model plus private copies of block ``b``
    and the ones above. ``ssp_way(2, 2) == "ABb"``; ``ssp_way(2, 1) == "AaBb"``."""
    _check_split(num_blocks, b)
    return "".join(c + c.lower() if i >= b - 1 else c
                   for i, c in enumerate(_LETTERS[:num_blocks]))


def all_ways(num_blocks: int) -> list[str]:
    """Every valid string for ``num_blocks`` blocks (3 ** num_blocks of them)."""
    ways = [""]
    for letter in _LETTERS[:num_blocks]:
        ways = [w + part for w in ways for part in (letter, letter + letter.lower(),
                                                     letter.lower())]
    return ways


def paper_ways(num_blocks: int) -> list[str]:
    """The distinct strings the four families PS / SP / SPS / SSP give over ``b = 1..L``
    (7 for ``L = 2``: AB, aB, ab, Ab, AaB, AaBb, ABb), in that family order."""
    ways: list[str] = []
    for family in (ps_way, sp_way, sps_way, ssp_way):
        for b in range(1, num_blocks + 1):
            way = family(num_blocks, b)
            if way not in ways:
                ways.append(way)
    return ways


# ===================================================================== the client
class Privatize(FederatedClient):
    """A backbone whose blocks are shared, private or both, as the string ``way`` says.

    Paper: "Aggregate or Not? Exploring Where to Privatize in DNN Based Federated Learning
    Under Different Non-IID Scenes" (Li et al., arXiv:2107.11954, 2021), Def. 4.1-4.3 and
    Sec. 4.2. Local loss: the sum of the cross-entropies of the (one or two) outputs; the
    server takes the mean of the shared copies only (configs use ``trainer.weighting: uniform``
    as the paper).

    Args:
        way: the privatization string, e.g. ``"AaB"`` (see :func:`parse_way`; the helpers
            :func:`ps_way`, :func:`sp_way`, :func:`sps_way`, :func:`ssp_way` write the paper's
            families). A bad string is a ``ValueError`` showing a valid one for the backbone.
        cut: the backbone's block cut, ``"coarse"`` (encoder, head: ``L = 2``) or ``"fine"``
            (VGG11: six blocks, pass ``backbone_kwargs: {all_fc_head: true}`` for the paper's
            exact blocks); ``Backbone.block_names(cut)`` lists them.
        combine: how two outputs make the prediction: ``"mean"`` of the two probability
            vectors (the paper's text, default) or their normalized ``"product"`` (the authors'
            fixed-split evaluation code, ``fedps.py``; with it fedlight runs that code's
            rounds, docs/authors_code.md). Training is the same for both (sum of two CEs).
        evaluate_after_training: score the personalized accuracy on each participant right
            after its local training (default: the paper's Def. 3.3 and the authors' code);
            False scores every client from its stored state after aggregation (fedlight's
            protocol for the other methods). The aggregation accuracy (the shared model on
            the global test set) is the same under both.
        **kwargs: the base client's arguments (``backbone``, ``lr``, ...).

    Construction: the blocks of a plain backbone, built first (so it draws the same random
    numbers as ``FedAvg`` / ``Local`` with the same seed), are the *primary* copy of every
    block: the shared copy where the block has one, else its only (private) copy. Where a block
    has both copies, the private one is taken from a second backbone built right after, i.e.
    freshly initialized, never cloned (the paper: "we only copy the block architecture and
    re-initialize the parameters"). State-dict names: ``model.<block>.*`` for primary copies
    (``"Ab"`` has exactly FedPer's names), ``private.<letter>.*`` for the extra private copies
    (``private.a`` is the private encoder of ``"AaB"``).

    Forward, for any ``L`` (two paths, a *shared path* through the uppercase copy where a
    block has one and a *private path* through the lowercase copy where it has one): the
    input starts as one feature. A block with both copies feeds the shared copy with the
    shared path's feature and the private copy with the private path's (both the same feature
    when the paths are merged), so the paths split or stay split. A block with one copy
    takes the mean of the two paths' features when they are split (the paths merge) and
    feeds both paths. This is exactly the paper's rule for every string it uses: "AaB" and SPS
    (``"AaBbCcDE"``) average the two encoder outputs before the shared upper blocks; "ABb" and
    SSP (``"ABCcDd"``) branch the private copies off the shared lower blocks' output, as
    the authors' ``SP2Net``; "AaBb" runs two full models; single-branch ways (PS, SP, and any
    string without a double block) never split. Strings outside the four families (``"aBb"``,
    ``"AaBCc"``) follow the same rule (merge at every single-copy block).

    When the paths end split there are two outputs: each is trained with its own
    cross-entropy (loss = sum) and the prediction combines their probabilities (``combine``);
    :meth:`forward` returns log-probabilities then, so argmax and cross-entropy still apply.
    :meth:`eval_outputs` also scores each path alone (``shared_path_accuracy``,
    ``private_path_accuracy`` columns). A global model exists (:attr:`has_global_model`, the
    aggregation accuracy of the paper) exactly when every block has an uppercase copy; it is
    the uppercase copies applied in order, which the evaluation takes from the aggregated state.
    A consequence of the construction: in ``"AaBb"`` the two paths never meet, no private loss
    reaches a shared copy, and the shared model trains exactly as FedAvg's with the same seed;
    the private branch only adds the ensemble (in ``"ABb"`` or ``"AaB"`` it does not: the
    private CE flows into the shared encoder, or the shared CE into the private encoder).
    """

    batchable = True  # its paths follow the way string, the same for every client
    sample_weighted = True  # its cross-entropies are means over the real samples

    def __init__(
        self,
        way: str = "AaB",
        cut: str = "coarse",
        combine: str = "mean",
        evaluate_after_training: bool = True,
        **kwargs: Any,
    ) -> None:
        if combine not in COMBINES:
            raise ConfigError(f"unknown combine {combine!r}; valid: {', '.join(COMBINES)}")
        super().__init__(**kwargs)
        self.way = way
        self.cut = cut
        self.combine = combine
        self.evaluate_after_local_training = bool(evaluate_after_training)
        if not isinstance(self.model, Backbone):
            raise ConfigError(f"{type(self).__name__} cuts a zoo backbone into blocks; backbone "
                              f"{self.backbone_name} is not one: pass a fedlight.models name")
        self.block_names = self.model.block_names(cut)
        self.copies = parse_way(way, self.block_names)
        self.letters = [c.lower() for c in _LETTERS[:len(self.block_names)]]
        doubled = [i for i, (shared, private) in enumerate(self.copies) if shared and private]
        self.private = nn.ModuleDict()
        if doubled:
            fresh = build_backbone(self.backbone_name, self.input_shape, self.num_classes,
                                   **self.backbone_kwargs)
            for i in doubled:
                self.private[self.letters[i]] = fresh.get_submodule(self.block_names[i])

    # ----------------------------------------------------------------- structure
    @property
    def primary_blocks(self) -> list[nn.Module]:
        """The primary copy of every block, bottom first (shared where there is one)."""
        return self.model.blocks(self.cut)

    def private_patterns(self) -> list[str]:
        """Keys of the blocks with only a lowercase copy, and every extra private copy."""
        prefixes = tuple(f"model.{name}." for name, (shared, _) in
                         zip(self.block_names, self.copies, strict=True) if not shared)
        keys = [k for k in self.state_dict() if k.startswith(prefixes)]
        return keys + (["private.*"] if len(self.private) else [])

    @property
    def has_global_model(self) -> bool:
        """True when every block has a shared copy (a complete shared model exists)."""
        return all(shared for shared, _ in self.copies) and not self.extra_private

    # ----------------------------------------------------------------- forward
    def path_outputs(self, x: Tensor) -> list[Tensor]:
        """Logits of the shared path and, where the paths end split, of the private path."""
        shared_h: Tensor = x
        private_h: Tensor | None = None  # None while the two paths are merged
        for block, letter, (shared, private) in zip(self.primary_blocks, self.letters,
                                                     self.copies, strict=True):
            if shared and private:
                source = shared_h if private_h is None else private_h
                shared_h, private_h = block(shared_h), self.private[letter](source)
            else:
                if private_h is not None:
                    shared_h, private_h = (shared_h + private_h) / 2, None
                shared_h = block(shared_h)
        return [shared_h] if private_h is None else [shared_h, private_h]

    def combine_outputs(self, outputs: Sequence[Tensor]) -> Tensor:
        """One output: its logits; two: the log of their combined probabilities."""
        if len(outputs) == 1:
            return outputs[0]
        log_probs = torch.stack([F.log_softmax(o, dim=-1) for o in outputs])
        if self.combine == "product":
            return F.log_softmax(log_probs.sum(0), dim=-1)
        return torch.logsumexp(log_probs, dim=0) - math.log(len(outputs))

    def forward(self, x: Tensor) -> Tensor:
        """Personalized prediction: logits, or log-probabilities where two outputs combine."""
        return self.combine_outputs(self.path_outputs(x))

    def global_forward(self, x: Tensor) -> Tensor:
        """The shared model: every block's uppercase copy in order (needs a global model)."""
        if not all(shared for shared, _ in self.copies):
            raise RuntimeError(f"privatization {self.way!r} has no complete shared model")
        for block in self.primary_blocks:
            x = block(x)
        return x

    def eval_outputs(self, x: Tensor) -> dict[str, Tensor]:
        """``personalized``, plus each path alone where there are two outputs."""
        outputs = self.path_outputs(x)
        named = {"personalized": self.combine_outputs(outputs)}
        if len(outputs) == 2:
            named.update(shared_path=outputs[0], private_path=outputs[1])
        return named

    # ----------------------------------------------------------------- training
    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        """Sum of the cross-entropies of the outputs (one or two)."""
        x, y = batch
        outputs = self.path_outputs(x)
        losses = [self.cross_entropy(o, y) for o in outputs]
        loss = losses[0] if len(losses) == 1 else losses[0] + losses[1]
        if len(losses) == 2:
            self.log("ce/shared_path", losses[0])
            self.log("ce/private_path", losses[1])
        self.log("train_loss", loss)
        return loss


__all__ = ["COMBINES", "Privatize", "all_ways", "paper_ways", "parse_way", "ps_way", "sp_way",
           "sps_way", "ssp_way"]
