"""braid as a torch.distributed backend.

    import braid_torch                      # registers the backend "braid"
    dist.init_process_group("braid", ...)   # env://, tcp://, file://, torchrun

Collectives run on braid's communicator; rendezvous goes through the store
torch.distributed creates for the group. The job secret braid's TCP
connections prove is BRAID_SECRET if set on every rank, else one rank 0
draws and publishes in that store (see process_group.h).

Compute threads: when several ranks of the first group share a host and
neither OMP_NUM_THREADS nor OPENBLAS_NUM_THREADS is set (torchrun sets the
first), that group lowers torch's intra-op threads and the loaded OpenBLAS's
pool to cores // ranks on the host, as `braid run` does; Debian's default
OpenBLAS otherwise runs a thread per core in every rank, which
torch.set_num_threads does not govern. Set either variable to keep your own
counts (threads.h).
"""
import torch
import torch.distributed as dist

from ._C import ProcessGroupBraid, c10d_base, create_process_group

__all__ = ["ProcessGroupBraid", "create_process_group", "backend_of"]


def backend_of(group=None):
    """The ProcessGroupBraid behind `group` (default: the default group).

    On torch 1.x the group is the ProcessGroupBraid itself; on torch 2.x it
    is torch's ProcessGroup, which holds a ProcessGroupBraid as its CPU
    backend."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if isinstance(pg, ProcessGroupBraid):
        return pg
    return pg._get_backend(torch.device("cpu"))


if "BRAID" not in dist.Backend._plugins:
    if c10d_base == "Backend":
        # torch 2.x: a c10d Backend serving CPU tensors of torch's group.
        dist.Backend.register_backend("braid", create_process_group, devices=["cpu"])
    else:
        dist.Backend.register_backend("braid", create_process_group)
