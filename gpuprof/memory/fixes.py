"""Fixes for an out-of-memory or near-capacity peak, each with the bytes it saves, computed from the snapshot.

Input: one moment's breakdown (:func:`gpuprof.memory.breakdown.breakdown`: categories, activations per module,
temporaries per site) and the allocator's state. Each fix is offered only where its bytes exist in this
snapshot, and is ranked by them:

* ``activation_checkpointing``: the activations the named modules hold at the moment (checkpointing a module
  keeps only its input; "up to" because that input stays); training runs only (a backward pass was recorded
  or parameters have gradients);
* ``smaller_micro_batch``: half the micro-batch with twice the accumulation steps halves what scales with the
  batch: activations and temporaries;
* ``optimizer_state_precision``: 8-bit optimizer state keeps a quarter of fp32 state (``saves`` = 3/4 of it);
  ``optimizer_state_sharding``: ZeRO/FSDP over N ranks keeps 1/N (given for N = 8, the common node);
* ``expandable_segments``: the allocator cache held in split segments, which
  ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` lets other sizes reuse (not offered when already on);
* ``free_holders``: tensors your code keeps outside a module's forward and the backward pass (a list of
  outputs, a loss kept with its graph), by line.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["rank_fixes", "SHARDS"]

SHARDS = 8  # ranks assumed for the sharding figure (one node of 8 GPUs); the text says so


def rank_fixes(at: Mapping[str, Any], split_cache: int | None, expandable: bool, training: bool
               ) -> list[dict[str, Any]]:
    """The applicable fixes, largest saving first: ``{"fix", "saves_bytes", "what", "targets"}``."""
    cats = at.get("categories") or {}
    out: list[dict[str, Any]] = []
    acts = cats.get("activations") or 0
    temps = cats.get("temporaries") or 0
    mods = [r for r in at.get("activations_by_module") or () if not str(r["module"]).startswith("<")]
    if training and mods:
        top = mods[:3]
        saved = sum(int(r["bytes"]) for r in top)
        if saved > 0:
            out.append({"fix": "activation_checkpointing", "saves_bytes": saved, "targets": [r["module"] for r in top],
                        "what": "activation checkpointing (torch.utils.checkpoint) of "
                                + ", ".join(str(r["module"]) for r in top)
                                + ": frees up to the activations they hold (their inputs stay)"})
    if acts + temps > 0:
        out.append({"fix": "smaller_micro_batch", "saves_bytes": (acts + temps) // 2, "targets": [],
                    "what": "half the micro-batch with twice the gradient-accumulation steps: halves the "
                            "activations and temporaries (same effective batch)"})
    opt = cats.get("optimizer_state") or 0
    if opt > 0:
        out.append({"fix": "optimizer_state_precision", "saves_bytes": opt * 3 // 4, "targets": [],
                    "what": "8-bit optimizer state (e.g. bitsandbytes AdamW8bit): a quarter of fp32 state"})
        out.append({"fix": "optimizer_state_sharding", "saves_bytes": opt * (SHARDS - 1) // SHARDS, "targets": [],
                    "what": f"optimizer state sharded over {SHARDS} ranks (ZeRO-1 / FSDP): each keeps 1/{SHARDS}"})
    if split_cache and not expandable:
        out.append({"fix": "expandable_segments", "saves_bytes": split_cache, "targets": [],
                    "what": "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the cache held in split segments "
                            "(fragmentation) becomes usable by other sizes"})
    holders = list(at.get("temporaries_by_site") or ())
    if holders:
        saved = sum(int(h["bytes"]) for h in holders)
        out.append({"fix": "free_holders", "saves_bytes": saved, "targets": [h["site"] for h in holders],
                    "what": "free (del, or keep .item()/.detach() values instead of tensors) what these lines "
                            "hold outside the forward and backward passes: " + ", ".join(h["site"] for h in holders)})
    out = [f for f in out if f["saves_bytes"] > 0]
    out.sort(key=lambda f: -f["saves_bytes"])
    return out
