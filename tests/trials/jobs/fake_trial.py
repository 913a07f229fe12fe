"""A stand-in for a training job in ``gpuprof try``'s orchestration tests (tests/trials/test_try_combined.py): no
torch. It reads the trial's options from ``GPUPROF_RUN_CONFIG`` as the bootstrap would and writes the trial's
result itself: each setting given takes 3 ms off a 10 ms step (so every variant is faster and the combined one
faster still), the losses are the same in every trial, ``applied`` is the settings it received."""

import json
import os

opts = json.loads(os.environ["GPUPROF_RUN_CONFIG"])["trial"]
settings = opts.get("settings") or {}
n = opts["warmup"] + opts["steps"]
step = 10_000.0 - 3_000.0 * len(settings)
times = [step + 10.0 * (i % 3) for i in range(opts["steps"])]
doc = {"trial_result_version": 1, "complete": True, "optimizer_steps": n, "warmup": opts["warmup"],
       "step_times_us": times, "data_wait_us": [0.0] * len(times), "losses": [1.0 / (i + 1) for i in range(n)],
       "host_rss_peak_bytes": 1 << 20, "cuda_peak_bytes": None, "applied": settings, "dataloader_sites": [],
       "sites": {}, "notes": []}
with open(opts["result"], "w") as fh:
    json.dump(doc, fh)
