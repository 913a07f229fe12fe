"""One user-frame policy (gpuprof.frames): analyze, memory and the capture agree on every frame."""

from __future__ import annotations

from types import FrameType

import pytest

from gpuprof.capture.guard import user_stacklevel
from gpuprof.frames import is_user_file, user_frame
from gpuprof.memory.frames import SiteTable
from gpuprof.trace.stacks import is_user_frame

LIBRARY = [
    "/venv/lib/python3.11/site-packages/transformers/trainer.py",  # the case that used to disagree
    "/usr/lib/python3/dist-packages/accelerate/accelerator.py",
    "/usr/lib/python3.11/threading.py",
    "/opt/conda/lib/python3.10/contextlib.py",
    "/src/pytorch/torch/nn/modules/module.py",  # torch from a source checkout
    "torch/nn/functional.py",  # relative, as older traces write it
    "transformers/models/bert/modeling_bert.py",
    "threading.py",
    "<frozen importlib._bootstrap>",
    "/src/pytorch/aten/src/ATen/native/TensorFactories.cpp",
    "??",
    "",
]
USER = [
    "/home/me/proj/train.py",
    "train.py",
    "models/bert_variant.py",
    "C:\\Users\\me\\proj\\train.py",
    "<ipython-input-3-abc>",  # a notebook cell is the user's code
]


@pytest.mark.parametrize("path", LIBRARY + USER)
def test_analyze_and_memory_agree_with_the_policy(path: str) -> None:
    user = path in USER
    assert is_user_file(path) is user
    assert SiteTable().is_internal(path) is (not user)  # gpuprof memory's allocation sites
    if path and not path.startswith("<"):
        assert is_user_frame(f"{path}(12): fn") is user  # gpuprof analyze's trace stacks


def test_memory_site_skips_an_installed_library_as_analyze_does() -> None:
    frames = [{"filename": "/venv/lib/python3.11/site-packages/transformers/modeling_utils.py", "line": 9,
               "name": "forward"},
              {"filename": "/home/me/proj/train.py", "line": 42, "name": "step"}]
    table = SiteTable()
    site = table.sites[table.site_of(frames)]
    assert (site.file, site.line) == ("/home/me/proj/train.py", 42)
    # --skip-frames still adds the user's own wrappers on top of the policy
    table = SiteTable([r"/proj/train\.py$"])
    assert table.is_internal("/home/me/proj/train.py") and not table.is_internal("/home/me/proj/other.py")


def _through_a_library(fn: object) -> object:
    """Call ``fn`` from a frame whose file is an installed transformers module (as a Trainer callback would)."""
    ns: dict[str, object] = {}
    code = compile("def call(fn):\n    return fn()\n", "/venv/lib/python3.11/site-packages/transformers/trainer.py",
                   "exec")
    exec(code, ns)
    return ns["call"](fn)  # type: ignore[operator]


def test_capture_skips_an_installed_library_too() -> None:
    f = _through_a_library(user_frame)  # what Profiler.start() records as the user's loop (live.location)
    assert isinstance(f, FrameType) and f.f_code.co_filename == __file__ and f.f_code.co_name == "_through_a_library"
    # the warnings' stacklevel: level 1 is the library's frame (it "calls warnings.warn"), 2 is this file's
    assert _through_a_library(user_stacklevel) == 2


def test_user_frame_skips_library_frames_to_the_users_line() -> None:
    # a function whose code says it lives in an installed library, calling user_frame from there
    ns: dict[str, object] = {"user_frame": user_frame}
    exec(compile("def lib_call():\n    return user_frame(1)\n", "/usr/lib/python3/site-packages/lib/x.py", "exec"), ns)
    f = ns["lib_call"]()  # type: ignore[operator]  # THE-CALL
    assert f is not None and f.f_code.co_filename == __file__
    assert "THE-CALL" in open(__file__).read().splitlines()[f.f_lineno - 1]
