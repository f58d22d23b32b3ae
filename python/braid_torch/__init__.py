"""braid as a torch.distributed backend.

    import braid_torch                      # registers the backend "braid"
    dist.init_process_group("braid", ...)   # env://, tcp://, file://, torchrun

Collectives run on braid's communicator; rendezvous goes through the store
torch.distributed creates for the group. The job secret braid's TCP
connections prove is BRAID_SECRET if set on every rank, else one rank 0
draws and publishes in that store (see process_group.h).
"""
import torch
import torch.distributed as dist

from ._C import ProcessGroupBraid, create_process_group

__all__ = ["ProcessGroupBraid", "create_process_group"]

if "BRAID" not in dist.Backend._plugins:
    dist.Backend.register_backend("braid", create_process_group)
