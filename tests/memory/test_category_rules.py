"""Category rules for what the former code misnamed: a library's workspace (cuBLAS, cuDNN) is its own category,
not a gradient or an activation; DataParallel's replicated weights are parameters, not activations; a compiled
backward graph is named by the user function its traced source lines are in. Planted stacks in PyTorch's layout,
run through the whole analysis."""

from __future__ import annotations

from typing import Any

from gpuprof.memory.analysis import analyze_memory
from gpuprof.memory.snapshot import parse_snapshot
from gpuprof_testing.snapshots import MiB, SnapshotBuilder

T = "/usr/lib/python3.11/site-packages/torch"


def _f(filename: str, line: int, name: str) -> dict[str, Any]:
    return {"filename": filename, "line": line, "name": name}


ENGINE = [_f("??", 0, "torch::autograd::Engine::evaluate_function(std::shared_ptr<GraphTask>&)"),
          _f("??", 0, "torch::autograd::Engine::thread_main(std::shared_ptr<GraphTask> const&)")]
CUBLAS_WS_BACKWARD = [
    _f("CUDACachingAllocator.cpp", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int)"),
    _f("", 0, "at::cuda::getNewWorkspace()"),
    _f("??", 0, "at::cuda::getCurrentCUDABlasHandle()"),
    _f("", 0, "void at::cuda::blas::gemm<float>(char, char, long)"),
    _f("??", 0, "torch::autograd::generated::AddmmBackward0::apply(std::vector<at::Tensor>&&)"),
    *ENGINE,
]
CUDNN_WS_FORWARD = [
    _f("CUDACachingAllocator.cpp", 0, "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate"),
    _f("Conv_v8.cpp", 0, "at::native::(anonymous namespace)::get_cudnn_workspace(long)"),
    _f("Conv_v8.cpp", 0, "at::native::run_single_conv(cudnnBackendDescriptorType_t)"),
    _f(f"{T}/nn/modules/conv.py", 456, "_conv_forward"),
    _f(f"{T}/nn/modules/conv.py", 460, "forward"),
    _f(f"{T}/nn/modules/module.py", 1750, "_call_impl"),
    _f("/home/u/proj/train.py", 30, "main"),
]
GRAD = [_f("??", 0, "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor>&&)"), *ENGINE]
REPLICA = [
    _f(f"{T}/nn/parallel/comm.py", 67, "broadcast_coalesced"),
    _f(f"{T}/nn/parallel/_functions.py", 23, "forward"),
    _f(f"{T}/autograd/function.py", 575, "apply"),
    _f(f"{T}/nn/parallel/replicate.py", 22, "_broadcast_coalesced_reshape"),
    _f(f"{T}/nn/parallel/replicate.py", 127, "replicate"),
    _f(f"{T}/nn/parallel/data_parallel.py", 200, "replicate"),
    _f(f"{T}/nn/parallel/data_parallel.py", 184, "forward"),
    _f(f"{T}/nn/modules/module.py", 1750, "_call_impl"),
    _f("/home/u/proj/train.py", 44, "main"),
]
SCATTER = [  # DataParallel's scattered inputs stay activations
    _f(f"{T}/nn/parallel/comm.py", 205, "scatter"),
    _f(f"{T}/nn/parallel/_functions.py", 104, "forward"),
    _f(f"{T}/autograd/function.py", 575, "apply"),
    _f(f"{T}/nn/parallel/data_parallel.py", 180, "forward"),
    _f(f"{T}/nn/modules/module.py", 1750, "_call_impl"),
    _f("/home/u/proj/train.py", 44, "main"),
]
GEN = "/tmp/torchinductor_u/p6/cp6jhjzn335lo2yptjts5dpdcdk4h.py"
COMPILED_BACKWARD = [
    _f(GEN, 9935, "call"),
    _f("/home/u/proj/transformer.py", 22, "forward"),  # the traced source lines, innermost first
    _f("/home/u/proj/transformer.py", 292, "forward"),
    _f(f"{T}/_inductor/utils.py", 2128, "run"),
    _f("??", 0, "torch::autograd::PyNode::apply(std::vector<at::Tensor>&&)"),
    *ENGINE,
    _f(f"{T}/_inductor/output_code.py", 466, "__call__"),
    _f(f"{T}/_dynamo/eval_frame.py", 745, "_fn"),
    _f(f"{T}/_functorch/_aot_autograd/runtime_wrappers.py", 2065, "_backward_impl"),
    _f(f"{T}/_functorch/_aot_autograd/runtime_wrappers.py", 1710, "backward"),
    _f(f"{T}/autograd/function.py", 307, "apply"),
]


def _analyse(*allocs: tuple[int, list[dict[str, Any]]]) -> dict[str, Any]:
    b = SnapshotBuilder()
    for size, frames in allocs:
        b.alloc(size, frames)
    section, _, _ = analyze_memory(parse_snapshot(b.snapshot(), "s.pickle"))
    dev: dict[str, Any] = section.devices[0]
    return dev


def test_cublas_workspace_made_in_backward_is_a_library_workspace_not_a_gradient() -> None:
    # a real gradient first, then the workspace, then a forward allocation: the workspace is a block the backward
    # pass made that outlived it, which the former code took for a gradient
    fwd = [_f(f"{T}/nn/modules/module.py", 1750, "_call_impl"), _f("/home/u/proj/train.py", 30, "main")]
    dev = _analyse((4 * MiB, GRAD), (32 * MiB, CUBLAS_WS_BACKWARD), (2 * MiB, fwd))
    cats = dev["categories"]
    assert cats["library_workspaces"] == 32 * MiB
    assert cats["gradients"] == 4 * MiB
    assert dev["why"]["library_workspaces"][0]["reason"].startswith("cuBLAS workspace")


def test_cudnn_workspace_in_a_forward_is_a_library_workspace_not_an_activation() -> None:
    dev = _analyse((96 * MiB, CUDNN_WS_FORWARD))
    assert dev["categories"]["library_workspaces"] == 96 * MiB and dev["categories"]["activations"] == 0
    assert "cuDNN workspace" in dev["why"]["library_workspaces"][0]["reason"]


def test_dataparallel_replicas_are_parameters_and_scattered_inputs_stay_activations() -> None:
    dev = _analyse((64 * MiB, REPLICA), (8 * MiB, SCATTER))
    assert dev["categories"]["parameters"] == 64 * MiB
    assert dev["categories"]["activations"] == 8 * MiB
    assert "DataParallel replica" in dev["why"]["parameters"][0]["reason"]


def test_compiled_backward_graph_is_named_by_the_function_its_source_lines_are_in() -> None:
    dev = _analyse((512 * MiB, COMPILED_BACKWARD))
    assert [r["module"] for r in dev["modules"]] == ["compiled graph cp6jhjzn335l (backward of transformer.py forward)"]
