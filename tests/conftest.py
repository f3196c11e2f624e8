"""Suite-wide settings: one torch thread (the toy models are too small to gain from two, and the
notebooks' kernels and the suite share the machine's cores)."""
import torch

torch.set_num_threads(1)
