"""PyTorch peer of bench/bench_zero.c: the same MLP (4 Linear 512 x 512,
tanh between), a global batch of 64 rows split over the ranks, Adam
(lr 1e-3), a mean squared error, on N processes with the gloo backend:
DistributedDataParallel with torch.optim.Adam ("ddp") or with
torch.distributed.optim.ZeroRedundancyOptimizer over Adam ("zero1", ZeRO
stage 1: each rank keeps the state of its share of the parameters, whole
tensors assigned greedily by size), and fully sharded data parallel with
each Linear wrapped as a unit: "fsdp" is FULL_SHARD (ZeRO-3: parameters
resharded after forward, gathered again for backward), "fsdp_grad_op"
SHARD_GRAD_OP (ZeRO-2: parameters kept whole from forward to backward,
gradients reduce-scattered, optimizer state sharded). FSDP1
(FullyShardedDataParallel) refuses the CPU in torch 2.x ("FSDP needs a
non-CPU accelerator device"), so where torch has FSDP2
(torch.distributed.fsdp.fully_shard, over a CPU DeviceMesh) it is used:
reshard_after_forward=True is FULL_SHARD, False is SHARD_GRAD_OP; older
torch uses FSDP1 with the ShardingStrategy of the same name. Where neither
can be imported it prints why on a "not_run" line and exits 0, so that the
other figures of the same command still come (torch 1.13 under Python
3.11: its sharded_tensor metadata dataclass has a mutable default, which
3.11 refuses at import).
Prints the median step time on rank 0 and, per rank, the optimizer state
bytes and parameter bytes it holds (local shards of DTensors) and its peak
resident set (ru_maxrss; torch has no allocator statistics on the CPU).
Usage: python bench/peer/zero.py N [steps] [ddp|zero1|fsdp_grad_op|fsdp]"""
import importlib
import os
import resource
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH, BATCH, WARM = 512, 64, 2


def local_bytes(t):
    t = t.to_local() if hasattr(t, "to_local") else t  # a DTensor (FSDP2): this rank's shard
    return t.numel() * t.element_size()


def state_bytes(opt):
    inner = opt.optim if isinstance(opt, ZeroRedundancyOptimizer) else opt
    return sum(local_bytes(t) for s in inner.state.values() for t in s.values()
               if torch.is_tensor(t) and t.dim() > 0)


def fsdp_wrap(layers, world, full_shard):
    """Each Linear a unit, then the whole model (FSDP2 where torch has it)."""
    try:
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.device_mesh import init_device_mesh
    except ImportError:
        fully_shard = None
    model = torch.nn.Sequential(*layers)
    if fully_shard is not None:
        mesh = init_device_mesh("cpu", (world,))
        for m in layers:
            if isinstance(m, torch.nn.Linear):
                fully_shard(m, mesh=mesh, reshard_after_forward=full_shard)
        fully_shard(model, mesh=mesh, reshard_after_forward=full_shard)
        return model, "FSDP2 fully_shard(reshard_after_forward=%s)" % full_shard
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    st = ShardingStrategy.FULL_SHARD if full_shard else ShardingStrategy.SHARD_GRAD_OP
    inner = [FSDP(m, sharding_strategy=st) if isinstance(m, torch.nn.Linear) else m for m in layers]
    return FSDP(torch.nn.Sequential(*inner), sharding_strategy=st), "FSDP1 %s" % st.name


def run(rank, world, steps, mode, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    layers = []
    for i in range(4):
        layers.append(torch.nn.Linear(WIDTH, WIDTH))
        if i < 3:
            layers.append(torch.nn.Tanh())
    api = "DDP"
    if mode in ("fsdp", "fsdp_grad_op"):
        model, api = fsdp_wrap(layers, world, mode == "fsdp")
    else:
        model = DDP(torch.nn.Sequential(*layers))
    if mode == "zero1":
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    torch.manual_seed(2)
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
    rows = BATCH // world
    xs, ys = x[rank * rows:(rank + 1) * rows], y[rank * rows:(rank + 1) * rows]
    times = []
    for s in range(WARM + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ((model(xs) - ys) ** 2).mean()
        loss.backward()
        opt.step()
        if s >= WARM:
            times.append(time.perf_counter() - t0)
    numel = sum(p.numel() for p in model.parameters())
    pbytes = sum(local_bytes(p) for p in model.parameters())
    mine = torch.tensor([float(state_bytes(opt)), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0,
                         float(pbytes)], dtype=torch.float64)
    every = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    if rank == 0:
        mib = 2.0 ** 20
        full = 2 * numel * 4
        print(f"torch {mode}_np{world}_step_ms {statistics.median(times) * 1e3:.2f} ms")
        for r, v in enumerate(every):
            theory = full / world if mode != "ddp" else full
            print(f"torch {mode}_np{world}_rank{r} state_MiB {v[0] / mib:.2f} state_theory_MiB {theory / mib:.2f} "
                  f"param_MiB {v[2] / mib:.2f} max_rss_MiB {v[1] / mib:.1f}")
        print(f"# torch {torch.__version__} gloo, {mode} ({api}), ranks {world}, {numel} parameters, "
              f"rank 0's last loss {loss.item():.6f}")
    dist.destroy_process_group()


def main():
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    mode = sys.argv[3] if len(sys.argv) > 3 else "ddp"
    if mode not in ("ddp", "zero1", "fsdp", "fsdp_grad_op"):
        sys.exit(f"zero.py: mode {mode}? (ddp, zero1, fsdp_grad_op, fsdp)")
    if mode in ("fsdp", "fsdp_grad_op"):
        try:
            importlib.import_module("torch.distributed.fsdp")
        except Exception as e:  # report, do not fail the command that runs every mode
            print(f"torch {mode}_np{world} not_run: torch {torch.__version__} on Python {sys.version.split()[0]}: "
                  f"import torch.distributed.fsdp fails: {type(e).__name__}: {str(e).splitlines()[0]}")
            return
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(world, steps, mode, port), nprocs=world, join=True)


if __name__ == "__main__":
    main()
