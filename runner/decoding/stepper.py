"""The one shape every decoding loop drives (runner.decoding.decode's eager and fast paths, and
runner.decoding.compiled's compiled step): kept apart so that neither imports the other for it."""

from __future__ import annotations

from collections.abc import Generator

import torch

# Each stepper yields the logits (1 × vocab) for the next position and is sent the chosen token.
Stepper = Generator[torch.Tensor, torch.Tensor, None]
