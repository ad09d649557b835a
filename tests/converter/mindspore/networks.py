"""Network definitions for ``--network`` in the tests: the train-core equivalents of the networks
that tests/fixtures/make_mindspore_fixtures.py builds with MindSpore (same parameter names)."""

from __future__ import annotations

from train.models.resnet import ResidualBlockBase, ResNet


def small_resnet() -> ResNet:
    return ResNet(ResidualBlockBase, [1, 1, 1], num_classes=10, in_channels=3, width=8, small_input=True)
