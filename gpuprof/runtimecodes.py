"""The runtime checks done during capture (GP6xx; GP71x for distributed runs; GP80x and GP85x for
torch.compile and AMP), declared as :class:`~gpuprof.codespec.CodeSpec`.

This module imports no torch, so ``gpuprof rules`` / ``gpuprof explain`` can
list the runtime checks next to the trace rules. Adding a check is one
:func:`runtime_spec` call in :data:`RUNTIME_CHECKS`; its thresholds are its
``options`` (``gpuprof.profile(options={"GP640.leak_min_steps": 12})``), whose
defaults :class:`gpuprof.capture.config.CheckOptions` reads from here. Each
check's long form is its ``### GPxxx`` section of ``docs/capture.md``.
"""

from __future__ import annotations

from gpuprof.codespec import CodeSpec, Option
from gpuprof.findings import Severity

__all__ = ["RUNTIME_CHECKS", "runtime_check", "runtime_spec"]

_W, _E = Severity.WARNING, Severity.ERROR


def runtime_spec(code: str, name: str, severity: Severity, title: str, module: str, *, bad: str, good: str,
                 options: tuple[Option, ...] = (), aliases: tuple[str, ...] = (),
                 superseded_by: tuple[str, ...] = ()) -> CodeSpec:
    """One runtime check: ``module`` is the gpuprof.capture module that raises it."""
    return CodeSpec(code, name, severity, title, "runtime", options=options, bad_example=bad, good_example=good,
                    docs_page="capture.md", aliases=aliases, superseded_by=superseded_by,
                    module=f"gpuprof.capture.{module}")


_PLACEMENT_MAX = Option("placement_max_modules", 4096, "modules inspected during the first step (bounded cost on "
                        "huge models)")

RUNTIME_CHECKS: tuple[CodeSpec, ...] = (
    runtime_spec(
        "GP601", "dataloader-main-process", _W,
        "DataLoader with num_workers=0 loads batches in the training process", "checks.loader.dataloader",
        bad="loader = DataLoader(ds, batch_size=64)            # num_workers=0",
        good="loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)",
        options=(Option("dataloader_share_warning", 0.10, "warning at or above this data-loading share of the "
                        "step time, info below"),
                 Option("dataloader_min_share", 0.02, "below this share the finding is not raised"))),
    runtime_spec(
        "GP602", "dataloader-pageable-memory", _W,
        "DataLoader with pin_memory=False while training on CUDA", "checks.loader.dataloader",
        bad="loader = DataLoader(ds, batch_size=64, num_workers=4)             # pageable batches",
        good="loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)"),
    runtime_spec(
        "GP603", "dataloader-too-many-workers", _W,
        "More DataLoader workers than CPU cores available to this process", "checks.loader.dataloader",
        bad="loader = DataLoader(ds, num_workers=32)       # on a job given 8 cores",
        good="loader = DataLoader(ds, num_workers=min(8, len(os.sched_getaffinity(0))))"),
    runtime_spec(
        "GP604", "dataloader-workers-restarted", _W,
        "persistent_workers=False: worker processes restart every epoch", "checks.loader.dataloader",
        bad="loader = DataLoader(ds, num_workers=8)        # workers re-spawned at every epoch",
        good="loader = DataLoader(ds, num_workers=8, persistent_workers=True)",
        options=(Option("persistent_workers_min_epochs", 3, "epochs seen in the run before "
                        "persistent_workers=False is reported"),)),
    runtime_spec(
        "GP605", "dataloader-workers-cpu-bound", _W,
        "The loop waits for batches while the DataLoader workers use every core they can have",
        "checks.loader.loaderverdicts",
        bad="loader = DataLoader(jpeg_ds, num_workers=7)   # 8 cores; each worker decodes full-size JPEGs",
        good="loader = DataLoader(preresized_ds, num_workers=7)   # decode cheaper, or on the GPU (DALI, nvjpeg)",
        options=(Option("loader_wait_share", 0.05, "the loader verdicts (GP605-GP607) need the loop to wait for "
                        "batches at least this share of the step time"),
                 Option("worker_busy_pct", 80.0, "a worker using at least this % of one core is CPU-bound"),
                 Option("worker_idle_pct", 30.0, "workers using at most this % of one core each while the loop "
                        "waits are waiting themselves (GP606)"),
                 Option("loader_min_samples", 3, "CPU samples with workers alive the verdicts need (the watch "
                        "samples about once a second)"))),
    runtime_spec(
        "GP606", "dataloader-workers-idle", _W,
        "The loop waits for batches while the DataLoader workers are mostly idle",
        "checks.loader.loaderverdicts",
        bad="ds = RemoteImages('s3://bucket/train')       # each __getitem__ waits for one object",
        good="ds = LocalShards(cache_dir='/local/nvme')    # or more workers/prefetch_factor to overlap the waits",
        options=(Option("loader_read_kib_per_sample", 1.0, "idle workers reading at least this many KiB per "
                        "sample (/proc/<pid>/io rchar) wait on storage or the network"),
                 Option("loader_io_wait_pct", 10.0, "idle workers blocked on block I/O at least this % of the "
                        "time each (delay accounting) wait on storage"),
                 Option("loader_blocked_wakeups_per_sample", 0.5, "idle workers without reads that wake up at "
                        "least this often per sample block inside __getitem__ (a socket, a lock, a sleep)"))),
    runtime_spec(
        "GP607", "dataloader-too-few-workers", _W,
        "The loop waits for batches, each DataLoader worker is CPU-bound and CPU cores are left unused",
        "checks.loader.loaderverdicts",
        bad="loader = DataLoader(ds, num_workers=2)        # on 16 cores; both workers at 100%",
        good="loader = DataLoader(ds, num_workers=8)        # spare cores put to work"),
    runtime_spec(
        "GP610", "module-split-across-devices", _E,
        "One module's own parameters/buffers live on different devices", "placement",
        bad="model.cuda(); model.norm.register_buffer('scale', torch.ones(512))   # buffer on the CPU",
        good="model.norm.register_buffer('scale', torch.ones(512)); model.cuda()  # moved with the module",
        options=(_PLACEMENT_MAX,)),
    runtime_spec(
        "GP611", "model-mixes-devices", _W,
        "A model's submodules mix CPU and accelerator devices", "placement",
        bad="model.cuda(); model.head = nn.Linear(512, 10)    # added after .cuda(): stays on the CPU",
        good="model.head = nn.Linear(512, 10); model.cuda()"),
    runtime_spec(
        "GP612", "input-on-other-device", _E,
        "A module received an input on another device than its parameters", "placement",
        bad="out = model.cuda()(x)                            # x still on the CPU",
        good="out = model.cuda()(x.cuda(non_blocking=True))",
        options=(_PLACEMENT_MAX,)),
    runtime_spec(
        "GP613", "device-mismatch-error", _E,
        "The step raised PyTorch's device-mismatch error", "placement",
        bad="loss = model.cuda()(x) - target                # target on the CPU: RuntimeError",
        good="loss = model.cuda()(x.cuda()) - target.cuda()"),
    runtime_spec(
        "GP614", "dtype-mismatch-error", _E,
        "The step raised PyTorch's dtype-mismatch error (Double vs Float, Long targets...)", "dtypes",
        bad="x = torch.from_numpy(np.random.randn(64, 16))     # float64 batch\nloss = model(x).sum()     # "
            "RuntimeError: mat1 and mat2 must have the same dtype",
        good="x = torch.from_numpy(np.random.randn(64, 16)).float()\nloss = model(x).sum()"),
    runtime_spec(
        "GP620", "cudnn-benchmark-off", _W,
        "torch.backends.cudnn.benchmark is off with convolutions and stable shapes", "settings",
        bad="model = torchvision.models.resnet50().cuda()   # fixed 224x224 batches, benchmark left off",
        good="torch.backends.cudnn.benchmark = True\nmodel = torchvision.models.resnet50().cuda()",
        options=(Option("stable_shape_batches", 8, "batches whose shapes are compared to call the input "
                        "shapes stable"),)),
    runtime_spec(
        "GP621", "tf32-disabled", _W,
        "TF32 disabled on an Ampere-or-newer GPU while running FP32 matmuls", "settings",
        bad="torch.set_float32_matmul_precision('highest')   # FP32 matmuls on an A100",
        good="torch.set_float32_matmul_precision('high')      # TF32 tensor cores"),
    runtime_spec(
        "GP622", "anomaly-detection-on", _W,
        "Autograd anomaly detection left on during training", "settings",
        bad="torch.autograd.set_detect_anomaly(True)\nfor x, y in loader: train_step(x, y)",
        good="for x, y in loader: train_step(x, y)              # anomaly mode only to hunt a NaN"),
    runtime_spec(
        "GP623", "cuda-launch-blocking", _W,
        "CUDA_LAUNCH_BLOCKING=1 during a profiled run: every kernel launch waits for the kernel", "settings",
        bad="CUDA_LAUNCH_BLOCKING=1 python train.py          # left over from debugging",
        good="python train.py                                 # launches queue ahead of the GPU"),
    runtime_spec(
        "GP624", "deterministic-algorithms", _W,
        "Deterministic algorithms forced (torch.use_deterministic_algorithms / cudnn.deterministic)", "settings",
        bad="torch.use_deterministic_algorithms(True)\ntorch.backends.cudnn.deterministic = True",
        good="torch.backends.cudnn.benchmark = True          # reproducibility runs only: deterministic mode"),
    runtime_spec(
        "GP630", "host-sync-site", _W,
        "A source line synchronises the host with the GPU every step", "checks.syncs.syncs",
        bad="for x, y in loader:\n    loss = step(x, y)\n    print(loss.item())        # waits for the GPU every step",
        good="for i, (x, y) in enumerate(loader):\n    loss = step(x, y)\n    if i % 100 == 0:\n"
             "        print(loss.item())",
        options=(Option("sync_min_per_step", 1.0, "a source line must sync at least this often per recorded "
                        "step"),)),
    runtime_spec(
        "GP640", "memory-growth", _W,
        "Memory grows step after step (a leak, e.g. accumulating loss instead of loss.item())", "memory",
        bad="total = 0\nfor x, y in loader:\n    total += model(x, y)       # keeps every step's graph",
        good="total = 0.0\nfor x, y in loader:\n    total += model(x, y).item()",
        options=(
            Option("leak_skip_steps", 3, "steps at the start of the run ignored (warm-up allocations)"),
            Option("leak_min_steps", 8, "fewest per-step samples the leak detector needs (CUDA: every step)"),
            Option("leak_trace_min_steps", 3, "fewest recorded steps when the series comes from the trace "
                   "(no CUDA)"),
            Option("leak_min_rising_share", 0.7, "fraction of step-to-step changes that must be increases"),
            Option("leak_min_bytes_per_step", 64 * 1024, "minimum growth per step to call it a leak", "bytes"),
            Option("leak_min_total_bytes", 2 * 1024 * 1024, "minimum total growth over the samples", "bytes"),
        )),
    runtime_spec(
        "GP641", "oom-during-run", _E,
        "The run hit a CUDA out-of-memory error; a snapshot was dumped", "memory",
        bad="model(torch.randn(4096, 3, 224, 224, device='cuda'))   # far more than the GPU holds",
        good="for chunk in torch.randn(4096, 3, 224, 224).split(256):\n    model(chunk.cuda())",
        aliases=("out-of-memory",), superseded_by=("GP512",)),
    runtime_spec(
        "GP650", "anomaly-window", _W,
        "The steady state broke mid-run; the anomaly window says what changed against the steady window",
        "job.verdict",
        bad="for i, (x, y) in enumerate(loader):    # from step 150 each batch is read from a slow disk\n"
            "    train_step(x, y)",
        good="loader = DataLoader(ds, num_workers=8, prefetch_factor=4)   # the wait hidden behind the step",
        options=(Option("anomaly_factor", 1.5, "a step slower than this many times the rolling median of the "
                        "normal steps is slow"),
                 Option("anomaly_steps", 5, "slow steps in a row that break the steady state"),
                 Option("anomaly_min_ms", 1.0, "a slow step is also at least this much slower than the median "
                        "(noise on very short steps is no anomaly)", "ms"))),
    runtime_spec(
        "GP651", "job-hang", _E,
        "No step finished for the hang timeout: each rank's stacks written, the line it waits at named", "job.hang",
        bad="if rank == 1:\n    load_checkpoint()     # never returns\ndist.barrier()        # rank 0 waits here for ever",
        good="dist.init_process_group('gloo', timeout=timedelta(minutes=5))   # a collective fails instead of hanging"),
    runtime_spec(
        "GP656", "host-contention", Severity.INFO,
        "Steps slowed while the training thread waited for a core: other processes' load, not the job", "job.verdict",
        bad="# 4 busy processes beside the job on a 2-core machine\nfor x, y in loader:\n    train_step(x, y)",
        good="# the job on cores of its own (taskset -c 0-1 python train.py), the other work elsewhere"),
    runtime_spec(
        "GP710", "missing-distributed-sampler", _W,
        "A DataLoader in a multi-rank run without DistributedSampler: every rank reads the same samples",
        "checks.distributed.distcheck",
        bad="loader = DataLoader(ds, batch_size=64, shuffle=True)      # under torchrun: same batches on every rank",
        good="sampler = DistributedSampler(ds)\nloader = DataLoader(ds, batch_size=64, sampler=sampler)\n"
             "for epoch in range(n):\n    sampler.set_epoch(epoch)"),
    runtime_spec(
        "GP711", "backend-device-mismatch", _W,
        "The process group's backend does not suit the device (gloo on CUDA, nccl on CPU)",
        "checks.distributed.distcheck",
        bad="dist.init_process_group('gloo')       # model and gradients on CUDA",
        good="dist.init_process_group('nccl' if torch.cuda.is_available() else 'gloo')"),
    runtime_spec(
        "GP712", "sampler-epoch-not-set", _W,
        "DistributedSampler.set_epoch() not called, or always with the same value: every epoch has the same order",
        "checks.distributed.distcheck",
        bad="sampler = DistributedSampler(ds)\nfor epoch in range(n):\n    for batch in DataLoader(ds, sampler=sampler): ...",
        good="sampler = DistributedSampler(ds)\nfor epoch in range(n):\n    sampler.set_epoch(epoch)        # the epoch, "
             "not a constant\n    for batch in DataLoader(ds, sampler=sampler): ..."),
    runtime_spec(
        "GP801", "compile-graph-break", _W,
        "torch.compile broke the graph at a source line (reason and line named)", "checks.compile.compiled",
        bad="@torch.compile\ndef forward(x):\n    y = x.relu()\n    print(y.shape)           # graph break: two graphs\n    return y * 2",
        good="@torch.compile\ndef forward(x):\n    y = x.relu()\n    return y * 2             # log outside the compiled function"),
    runtime_spec(
        "GP802", "compile-recompilation", _W,
        "torch.compile recompiled a function during the capture (the guard that failed named)",
        "checks.compile.compiled",
        bad="model = torch.compile(model)\nfor bs in (32, 24, 16):\n    model(torch.randn(bs, 128))   # a new shape: recompiles",
        good="model = torch.compile(model, dynamic=True)   # or pad batches to one shape\n"
             "for bs in (32, 24, 16):\n    model(torch.randn(bs, 128))"),
    runtime_spec(
        "GP803", "compile-time-in-steps", _W,
        "torch.compile spent time compiling inside steps after the first", "checks.compile.compiled",
        bad="model = torch.compile(model)\nfor x in batches_of_changing_shape: train_step(x)   # compiles mid-run",
        good="model = torch.compile(model, dynamic=True)\nwarm_up(model)                  # compile before timing",
        options=(Option("compile_min_share", 0.01, "compile time after step 0, as a share of all step time, "
                        "from which it is reported"),)),
    runtime_spec(
        "GP804", "cudagraphs-skipped", _W,
        "torch.compile(mode=\"reduce-overhead\") did not use CUDA graphs (reason named)", "checks.compile.compiled",
        bad="model = torch.compile(model, mode='reduce-overhead')\nmodel(x_on_cpu_mixed_with_cuda)   # graphs skipped",
        good="model = torch.compile(model, mode='reduce-overhead')\nmodel(x.cuda())                  # every input on the GPU"),
    runtime_spec(
        "GP850", "amp-deprecated-spelling", _W,
        "Deprecated torch.cuda.amp / torch.cpu.amp autocast or GradScaler spelling", "checks.amp.amp",
        bad="with torch.cuda.amp.autocast():\n    loss = model(x)",
        good="with torch.autocast(device_type='cuda', dtype=torch.bfloat16):\n    loss = model(x)"),
    runtime_spec(
        "GP851", "amp-disabled", _W,
        "autocast or GradScaler asked for a device this machine lacks: silently off", "checks.amp.amp",
        bad="with torch.autocast(device_type='cuda'):     # on a CPU-only machine: autocast is off\n    loss = model(x)",
        good="dev = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
             "with torch.autocast(device_type=dev, dtype=torch.bfloat16):\n    loss = model(x)"),
)

_BY_CODE = {c.code: c for c in RUNTIME_CHECKS}


def runtime_check(code: str) -> CodeSpec:
    """The spec of runtime check ``code`` (KeyError for an unknown code)."""
    return _BY_CODE[code]
