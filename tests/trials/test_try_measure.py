"""``gpuprof try``'s parts that need no job: the catalogue, ``--set``, the trial plan, the options, the verdicts
and numerics of try.json from given results, the rendering. Fast: no torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuprof.run.options import RunOptions, TrialOptions, TrialSettings
from gpuprof.trials import measure, render
from gpuprof.trials.runner import Outcome
from gpuprof.trials.variants import TryUsageError, Variant, catalogue, parse_set, plan_trials


def test_catalogue_has_no_cuda_variant_without_cuda_and_bounds_the_workers_by_the_cores() -> None:
    cpu = catalogue(cuda=False, cores=2)
    assert not any(v.cuda_only for v in cpu)
    assert [v.settings.num_workers for v in cpu if v.settings.num_workers is not None] == [1, 2]
    assert max(v.settings.num_workers or 0 for v in catalogue(cuda=False, cores=6)) == 6
    gpu = {v.name for v in catalogue(cuda=True, cores=2)}
    assert {"pin_memory", "matmul_precision=high", "cudnn_benchmark"} <= gpu
    assert [v.name for v in catalogue(cuda=False, cores=1) if v.settings.num_workers] == ["num_workers=1"]


def test_set_parses_the_users_values_into_one_variant() -> None:
    v = parse_set("num_workers=3,persistent_workers=true")
    assert v.settings == TrialSettings(num_workers=3, persistent_workers=True)
    assert not v.numeric
    assert parse_set("allow_tf32=true").settings.matmul_precision == "high"
    assert parse_set("cudnn.benchmark=1").settings.cudnn_benchmark is True
    assert parse_set("set_to_none=off").settings.zero_grad_set_to_none is False
    assert parse_set("matmul_precision=medium").numeric


@pytest.mark.parametrize(("text", "said"), [
    ("num_workers", "expected NAME=VALUE"), ("num_workers=", "expected NAME=VALUE"), ("", "expected NAME=VALUE"),
    ("workers=2", "unknown setting 'workers'"), ("num_workers=-1", "num_workers"),
    ("num_workers=two", "num_workers"), ("matmul_precision=fast", "matmul_precision"),
    ("allow_tf32=2", "allow_tf32 takes true or false"), ("prefetch_factor=0", "prefetch_factor"),
])
def test_set_refuses_what_it_cannot_apply(text: str, said: str) -> None:
    with pytest.raises(TryUsageError, match=None) as err:
        parse_set(text)
    assert said in str(err.value)
    assert "\n" not in str(err.value)


def test_plan_runs_the_baseline_first_and_last_and_spreads_the_others() -> None:
    vs = catalogue(cuda=False, cores=2)
    labels = [label for label, _ in plan_trials(vs, 2)]
    assert labels[0] == "baseline-1" and labels[-1] == "baseline-2"
    assert labels[1:-1] == [v.name for v in vs]
    plan = plan_trials(vs, 4)
    assert sum(1 for _, v in plan if v is None) == 4
    assert [v.name for _, v in plan if v is not None] == [v.name for v in vs]
    inner = [i for i, (_, v) in enumerate(plan) if v is None][1:-1]
    assert all(0 < i < len(plan) - 1 for i in inner)


def test_trial_options_travel_typed_and_bad_ones_are_refused() -> None:
    opts = RunOptions(logdir="d", trial=TrialOptions(result="/x/result.json", warmup=2, steps=5,
                                                     settings=TrialSettings(num_workers=2)))
    assert RunOptions.from_env(opts.to_env()) == opts
    bad = json.loads(opts.to_env())
    bad["trial"]["settings"]["num_workers"] = -1
    with pytest.raises(ValueError, match=r"\$\.trial\.settings\.num_workers"):
        RunOptions.from_env(json.dumps(bad))
    bad["trial"]["settings"] = {"nonsense": 1}
    with pytest.raises(ValueError, match="nonsense"):
        RunOptions.from_env(json.dumps(bad))


def _out(times: list[float], losses: list[float | None] | None = None, error: str | None = None,
         applied: dict[str, Any] | None = None, wait: float = 0.0) -> Outcome:
    result = None if error else {
        "complete": True, "step_times_us": times, "data_wait_us": [wait] * len(times),
        "losses": losses if losses is not None else [1.0, 0.5, 0.25], "host_rss_peak_bytes": 100 << 20,
        "cuda_peak_bytes": None, "applied": {"num_workers": 2} if applied is None else applied}
    return Outcome(Path("t"), status=0 if not error else 1, result=result, error=error)


BASE = [10_000.0 + 10 * (i % 5) for i in range(20)]


def _doc(variants: list[tuple[Variant, Outcome]], base: list[Outcome] | None = None) -> dict[str, Any]:
    base = base or [_out(BASE, wait=6000.0), _out([x + 5 for x in BASE], wait=6000.0)]
    return measure.build(["python", "t.py"], base, variants, 3, 20, 2, False, False)


def test_verdicts_follow_the_rank_test_and_the_noise() -> None:
    w2 = Variant("num_workers=2", TrialSettings(num_workers=2))
    same = Variant("zero_grad_set_to_none", TrialSettings(zero_grad_set_to_none=True))
    slow = Variant("prefetch_factor=4", TrialSettings(prefetch_factor=4))
    doc = _doc([(w2, _out([x - 4000 for x in BASE])), (same, _out([x + 3 for x in BASE], applied={"z": True})),
                (slow, _out([x + 3000 for x in BASE])),
                (Variant("num_workers=1", TrialSettings(num_workers=1)), _out([], error="the job failed: boom"))])
    by = {v["name"]: v for v in doc["variants"]}
    assert by["num_workers=2"]["verdict"] == "faster"
    assert by["num_workers=2"]["speedup"] > 1.5
    assert by["num_workers=2"]["measured_saving_us"] == pytest.approx(4000, abs=10)
    assert by["num_workers=2"]["predicted_saving_us"] == 6000.0  # the baseline's data wait per step
    assert by["num_workers=2"]["code_change"] == "DataLoader(..., num_workers=2)"
    assert by["zero_grad_set_to_none"]["verdict"] == "same" and by["zero_grad_set_to_none"]["code_change"] is None
    assert by["zero_grad_set_to_none"]["predicted_saving_us"] is None
    assert by["prefetch_factor=4"]["verdict"] == "slower"
    assert by["num_workers=1"]["verdict"] == "failed" and by["num_workers=1"]["error"] == "the job failed: boom"
    assert [v["verdict"] for v in doc["variants"]] == ["faster", "same", "slower", "failed"]
    assert doc["baseline"]["step_time_median_us"] == pytest.approx(10_022.5)
    assert len(doc["baseline"]["runs"]) == 2 and doc["baseline"]["losses_reproducible"] is True
    json.dumps(doc, allow_nan=False)


def test_a_faster_median_within_the_run_to_run_noise_is_same() -> None:
    """The two baseline runs differ by 3 ms: a variant 2 ms faster, every step of it, is within that noise."""
    base = [_out(BASE), _out([x + 3000 for x in BASE])]
    w2 = Variant("num_workers=2", TrialSettings(num_workers=2))
    doc = _doc([(w2, _out([x - 500 for x in BASE]))], base)
    assert doc["variants"][0]["verdict"] == "same"
    assert doc["variants"][0]["interval_us"] >= 3000


def test_numerics_non_numeric_variants_must_keep_the_losses_bit_for_bit() -> None:
    w2 = Variant("num_workers=2", TrialSettings(num_workers=2))
    tf32 = Variant("matmul_precision=high", TrialSettings(matmul_precision="high"))
    tf32_far = Variant("matmul_precision=medium", TrialSettings(matmul_precision="medium"))
    doc = _doc([(w2, _out([x - 4000 for x in BASE], losses=[1.0, 0.5, 0.2500001])),
                (tf32, _out(BASE, losses=[1.0, 0.5, 0.2501], applied={"matmul_precision": "high"})),
                (tf32_far, _out(BASE, losses=[1.0, 0.6, 0.25], applied={"matmul_precision": "medium"}))])
    by = {v["name"]: v for v in doc["variants"]}
    assert by["num_workers=2"]["verdict"] == "changed-numerics"
    assert by["num_workers=2"]["loss_max_abs_diff"] == pytest.approx(1e-7)
    assert by["matmul_precision=high"]["verdict"] == "same"  # within the tolerance of a precision change
    assert by["matmul_precision=high"]["loss_max_abs_diff"] == pytest.approx(1e-4)
    assert by["matmul_precision=medium"]["verdict"] == "changed-numerics"


def test_unreproducible_baseline_losses_are_not_compared() -> None:
    base = [_out(BASE, losses=[1.0, 0.5]), _out(BASE, losses=[1.0, 0.7])]
    w2 = Variant("num_workers=2", TrialSettings(num_workers=2))
    doc = _doc([(w2, _out(BASE, losses=[3.0, 3.0]))], base)
    assert doc["baseline"]["losses_reproducible"] is False
    assert doc["variants"][0]["verdict"] == "same"
    assert "not compared" in doc["variants"][0]["note"]


def test_a_setting_no_loader_took_is_said() -> None:
    pw = Variant("persistent_workers", TrialSettings(persistent_workers=True))
    doc = _doc([(pw, _out(BASE, applied={}))])
    assert "no DataLoader" in doc["variants"][0]["note"]


def test_no_baseline_is_an_error_of_the_document() -> None:
    doc = _doc([], [_out([], error="the job failed (exit code 1): x"), _out([], error="the job failed (exit code 1): x")])
    assert doc["baseline"]["step_time_median_us"] is None
    assert "no baseline run measured a step" in doc["error"]


def test_rendering_shows_names_inert() -> None:
    v = Variant("num_workers=2\x1b[2J|`x`", TrialSettings(num_workers=2))
    doc = _doc([(v, _out([x - 4000 for x in BASE]))])
    text = render.table(doc)
    md = render.markdown(doc)
    assert "\x1b" not in text and "\x1b" not in md
    assert "\\x1b[2J" in text
    row = next(line for line in md.splitlines() if "num_workers=2" in line)
    assert "\\|" in row and "\\`x\\`" in row
    assert "faster" in text and "baseline" in text


def test_the_code_change_names_the_loaders_lines_and_the_settings() -> None:
    v = Variant("x", TrialSettings(num_workers=2, persistent_workers=True, matmul_precision="high"))
    text = measure.code_change(v, ["/u/train.py:51", 3])
    assert text == ("DataLoader(..., num_workers=2, persistent_workers=True) at /u/train.py:51; "
                    "torch.set_float32_matmul_precision('high') after importing torch")


def test_catalogue_applies_per_machine_the_model_and_optimizer_variants() -> None:
    cpu = {v.name for v in catalogue(cuda=False, cores=2)}
    assert {"autocast=bf16", "channels_last", "compile", "foreach", "fused", "zero_grad_set_to_none"} <= cpu
    assert "autocast=fp16" not in cpu  # float16 autocast is CUDA's
    assert "compile" not in {v.name for v in catalogue(cuda=False, cores=2, compile_ok=False)}
    gpu = {v.name for v in catalogue(cuda=True, cores=2, bf16_ok=False)}
    assert "autocast=fp16" in gpu and "autocast=bf16" not in gpu
    assert Variant("x", TrialSettings(autocast="fp16")).cuda_only


def test_set_takes_the_model_and_optimizer_settings() -> None:
    assert parse_set("autocast=bfloat16").settings.autocast == "bf16"
    assert parse_set("amp=fp16").settings.autocast == "fp16"
    assert parse_set("channels_last=1,compile=true").settings == TrialSettings(channels_last=True, compile=True)
    assert parse_set("fused=true").settings.optimizer_fused is True
    with pytest.raises(TryUsageError, match="foreach and fused cannot both be true"):
        parse_set("foreach=true,fused=true")
    with pytest.raises(TryUsageError, match="autocast"):
        parse_set("autocast=fp8")


def test_each_numerics_class_has_its_tolerance() -> None:
    """The class decides: reordered arithmetic (foreach, fused) 1e-3, autocast 5e-2, TF32 and cuDNN's 1e-2."""
    cl = Variant("fused", TrialSettings(optimizer_fused=True))
    amp = Variant("autocast=bf16", TrialSettings(autocast="bf16"))
    amp_far = Variant("autocast=bf16 far", TrialSettings(autocast="bf16"))
    fe = Variant("foreach", TrialSettings(optimizer_foreach=True))
    doc = _doc([(cl, _out(BASE, losses=[1.0, 0.5, 0.2505], applied={"optimizer_fused": True})),
                (amp, _out(BASE, losses=[1.0, 0.51, 0.26], applied={"autocast": "bf16"})),
                (amp_far, _out(BASE, losses=[1.0, 0.6, 0.25], applied={"autocast": "bf16"})),
                (fe, _out(BASE, losses=[1.0, 0.5, 0.25], applied={"optimizer_foreach": True}))])
    by = {v["name"]: v for v in doc["variants"]}
    assert (by["fused"]["numerics"], by["fused"]["loss_rtol"]) == ("reordered", 1e-3)
    assert by["fused"]["verdict"] == "changed-numerics"  # 2e-3 relative: beyond reordered's 1e-3
    assert Variant("c", TrialSettings(channels_last=True)).numerics == "precision"
    assert (by["autocast=bf16"]["numerics"], by["autocast=bf16"]["verdict"]) == ("reduced-precision", "same")
    assert by["autocast=bf16 far"]["verdict"] == "changed-numerics"  # 20%: beyond autocast's 5e-2
    assert by["foreach"]["verdict"] == "same" and by["foreach"]["loss_max_abs_diff"] == 0.0
    combined = Variant("c", TrialSettings(num_workers=2, autocast="bf16", compile=True))
    assert combined.numerics == "reduced-precision"  # the loosest of its parts


def test_a_setting_the_job_did_not_take_is_said_by_name() -> None:
    v = Variant("channels_last,foreach", TrialSettings(channels_last=True, optimizer_foreach=True))
    doc = _doc([(v, _out(BASE, applied={"optimizer_foreach": True}))])
    note = doc["variants"][0]["note"]
    assert "no 4-D parameter or input" in note and "foreach" not in note.replace("channels_last,foreach", "")


def test_the_code_change_names_the_model_and_optimizer_lines() -> None:
    v = Variant("x", TrialSettings(channels_last=True, compile=True, autocast="bf16", optimizer_fused=True,
                                   zero_grad_set_to_none=True))
    text = measure.code_change(v, [], {"model": ["/u/train.py:60"], "optimizer": ["/u/train.py:40"],
                                       "zero_grad": ["/u/train.py:58"]})
    assert "optimizer.zero_grad(set_to_none=True) at /u/train.py:58" in text
    assert "torch.optim.<Optimizer>(..., fused=True) at /u/train.py:40" in text
    assert "model = torch.compile(model) once, before the call at /u/train.py:60" in text
    assert "torch.channels_last" in text and "dtype=torch.bfloat16" in text


def test_combined_takes_one_setting_of_each_kind_in_order_of_value() -> None:
    from gpuprof.trials.variants import combine

    w2, w1 = Variant("num_workers=2", TrialSettings(num_workers=2)), Variant("num_workers=1", TrialSettings(num_workers=1))
    fused, fe = Variant("fused", TrialSettings(optimizer_fused=True)), Variant("foreach", TrialSettings(optimizer_foreach=True))
    both = combine([w2, fused, w1, fe, Variant("channels_last", TrialSettings(channels_last=True))])
    assert both is not None and both.name == "combined: num_workers=2 + fused + channels_last"
    assert both.settings == TrialSettings(num_workers=2, optimizer_fused=True, channels_last=True)
    assert combine([w2, w1]) is None and combine([w2]) is None


def test_auto_suggests_from_the_findings_only_what_applies_and_lists_code_changes() -> None:
    from types import SimpleNamespace

    from gpuprof.findings import SourceLocation
    from gpuprof.trials.suggest import code_change_rows, suggest

    def f(code: str, cost: float | None, what_if: float | None = None) -> Any:
        return SimpleNamespace(code=code, cost_us_per_step=cost, what_if_saving_us=what_if, message=f"{code} msg",
                               location=SourceLocation("/u/train.py", 7))

    found = [f("GP602", 5000.0), f("GP601", 20000.0, 12000.0), f("GP203", 3000.0), f("GP840", 100.0),
             f("GP656", None)]
    picks = suggest(found, catalogue(cuda=False, cores=2))
    names = [p.variant.name for p in picks]
    assert names == ["num_workers=1", "num_workers=2", "zero_grad_set_to_none"]  # costliest finding first
    assert "pin_memory" not in names  # GP602 suggests it, but it is CUDA's
    assert (picks[0].codes, picks[0].cost_us, picks[0].what_if_us) == (("GP601",), 20000.0, 12000.0)
    assert "pin_memory" in [p.variant.name for p in suggest(found, catalogue(cuda=True, cores=2))]
    (row,) = code_change_rows(found)
    assert row["code"] == "GP203" and row["location"] == "/u/train.py:7" and row["predicted_saving_us"] == 3000.0
    assert ".item()" in row["change"]


@pytest.mark.slow  # a whole real trace analysed
def test_suggestions_from_a_real_traces_findings() -> None:
    """The tbplugin's ResNet-50 sample (num_workers=0, FP32 convolutions on a V100-era GPU): its findings suggest
    the worker counts (GP102) and, with CUDA, pinning and TF32/autocast; each variant's prediction is the largest
    cost of the findings that suggested it, computed here from the report's findings; the pageable copy in the
    script is a code change at its line."""
    import gpuprof
    from gpuprof.trials.suggest import SUGGESTS, code_change_rows, suggest
    from gpuprof_testing.realtraces import shared_path

    path = shared_path("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143089861.pt.trace.json.gz")
    findings = list(gpuprof.analyze(str(path)).findings)
    codes = {f.code for f in findings}
    assert "GP102" in codes
    gpu = suggest(findings, catalogue(cuda=True, cores=4))
    cpu = suggest(findings, catalogue(cuda=False, cores=4))
    assert not any(p.variant.cuda_only for p in cpu)
    assert {"num_workers=1", "num_workers=2", "num_workers=4"} <= {p.variant.name for p in cpu}
    for p in gpu:
        assert set(p.codes) <= codes and all(p.variant.name in SUGGESTS[c] or p.variant.settings.num_workers
                                             for c in p.codes)
        costs = [f.cost_us_per_step for f in findings if f.code in p.codes and f.cost_us_per_step is not None]
        assert p.cost_us == (max(costs) if costs else None)
    rows = code_change_rows(findings)
    assert any(r["code"] == "GP201" and str(r["location"]).endswith(".py:44") for r in rows)
    assert {r["code"] for r in rows} <= codes


def test_every_field_of_try_json_is_documented() -> None:
    """docs/try.md's try.json table names every key the document and its rows carry (`key` in the table)."""
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "try.md").read_text()
    section = text.split("## Output and exit codes", 1)[1].split("\n## ", 1)[0]
    named = {word for span in re.findall(r"`([^`]+)`", section) for word in re.findall(r"[a-z_]+", span)}
    analysis = {"summary": "x", "notes": [], "error": None, "report": None, "directory": "d", "wall_s": 1.0,
                "findings": [], "needs_code_change": []}
    w2 = Variant("num_workers=2", TrialSettings(num_workers=2))
    doc = measure.build(["python", "t.py"], [_out(BASE), _out(BASE)], [(w2, _out([x - 4000 for x in BASE]))],
                        3, 20, 2, False, False, analysis=analysis)
    keys = set(doc) | set(doc["baseline"]) | set(doc["baseline"]["runs"][0]) | set(doc["variants"][0]) | \
        set(doc["analysis"])
    assert keys - named == set()
