"""gpuprof writes its per-step scalars as TFRecord event files itself: TensorBoard must read them back exactly."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tb_crc  # noqa: E402

from gpuprof.render.tensorboard import TensorBoardWriter, masked_crc32c, text_summary  # noqa: E402


@pytest.mark.parametrize("data", [b"", b"12345678", bytes(range(256)), b"\xff" * 73])
def test_crc_matches_tensorboards(data):
    assert masked_crc32c(data) == tb_crc(data)


@pytest.mark.parametrize("text", ["", "**2 findings**", "ünï\u202ecode\n| a | b |\n", "x" * 70_000])
def test_text_summary_is_the_bytes_tensorboards_text_pb_makes(text):
    # gpuprof builds the text summary from the protobuf messages, without text_pb's TensorFlow stub import
    from tensorboard.plugins.text.summary_v2 import text_pb

    tag = "gpuprof/findings/text_summary"
    assert text_summary(tag, text) == text_pb(tag, text).SerializeToString()


@pytest.mark.parametrize("step", [0, 1, 127, 128, 300, 2**40])
@pytest.mark.parametrize("values", [
    {"step_time_ms": 10.5}, {"step_time_ms": 0.0, "host_rss_mib": 512.5},
    {"step_time_ms": 0.1, "data_loading_share": 1 / 3, "cpu_process_pct": -2.5e-40},
    {"step_time_ms": float("nan"), "host_rss_mib": float("inf"), "memory_peak_mib": -float("inf")},
    {"step_time_ms": 1e39, "host_rss_mib": -1e39, "memory_allocated_mib": 3.4028235e38}])
def test_scalar_event_is_the_bytes_protobuf_makes(step, values):
    # gpuprof encodes the Event and Summary messages itself (no protobuf import in the training process)
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    from gpuprof.render.tensorboard import _SCALAR_HEAD, TAGS, _event, _float32

    made = _event(1796682441.578931, step, summary=b"".join(_SCALAR_HEAD[k] + _float32(v) for k, v in values.items()))
    vals = [Summary.Value(tag=TAGS[k], simple_value=v) for k, v in values.items()]
    assert made == Event(wall_time=1796682441.578931, step=step, summary=Summary(value=vals)).SerializeToString()


def test_file_version_event_is_the_bytes_protobuf_makes():
    from tensorboard.compat.proto.event_pb2 import Event

    from gpuprof.render.tensorboard import _event

    want = Event(wall_time=1796682441.5, file_version="brain.Event:2").SerializeToString()
    assert _event(1796682441.5, file_version="brain.Event:2") == want


def test_no_tensorboard_package_no_writer(tmp_path, monkeypatch):
    # without the package the files would be for no reader: the capture says what to install (and writes none)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match="tensorboard"):
        TensorBoardWriter(tmp_path / "tb")
    assert not (tmp_path / "tb").exists()


def test_scalars_and_text_read_back_exactly(tmp_path):
    with TensorBoardWriter(tmp_path, filename_suffix=".w0") as w:
        for i in range(300):
            w.add_step(i, {"step_time_ms": 10.0 + i, "host_rss_mib": 512.5})
        w.add_step(300, {})  # nothing to write: no event
        w.add_text("**2 findings**")
    files = os.listdir(tmp_path)
    # one writer, one event file: scalars and text together (issue 12)
    assert len(files) == 1 and files[0].startswith("events.out.tfevents.") and files[0].endswith(".w0")
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    steps = acc.Scalars("gpuprof/step_time_ms")
    assert [s.step for s in steps] == list(range(300))
    assert [s.value for s in steps] == [10.0 + i for i in range(300)]
    assert {s.value for s in acc.Scalars("gpuprof/host_rss_mib")} == {512.5}
    assert "gpuprof/findings/text_summary" in acc.Tags()["tensors"]  # the findings text, as SummaryWriter tags it
    text = acc.Tensors("gpuprof/findings/text_summary")[-1].tensor_proto.string_val[0].decode()
    assert text == "**2 findings**"
