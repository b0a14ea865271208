"""The experiment tests share a 2-core machine: keep torch to one thread."""

import torch

torch.set_num_threads(1)
