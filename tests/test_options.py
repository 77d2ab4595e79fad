"""The typed options: validated when made, parsed once, recorded whole in the plan."""

from __future__ import annotations

import numpy as np
import pytest

import woodpecker
from tests.helpers import conv_bn_relu_residual
from woodpecker import config
from woodpecker.errors import OptionsError, WoodpeckerError
from woodpecker.options import (
    SEARCHES,
    CompileOptions,
    QuantizeOptions,
    TuneOptions,
    UnknownOption,
    parse_budget,
)
from woodpecker.tune.searchers import SEARCHERS


@pytest.mark.parametrize("text,seconds", [("90", 90.0), ("90s", 90.0), ("15m", 900.0),
                                          ("1h", 3600.0), (" 2M ", 120.0), (30, 30.0)])
def test_budget_parsed(text, seconds):
    assert parse_budget(text) == seconds
    assert TuneOptions(text).budget_s == seconds


@pytest.mark.parametrize("bad", ["", "fast", "10x", "-5m", "nan"])
def test_bad_budget_is_one_error(bad):
    with pytest.raises(WoodpeckerError, match="bad budget"):
        TuneOptions(bad)


def test_bad_options_fail_before_work():
    with pytest.raises(WoodpeckerError, match="unknown search"):
        TuneOptions(search="annealing-typo")
    with pytest.raises(WoodpeckerError, match="threads"):
        CompileOptions(threads=0)
    with pytest.raises(WoodpeckerError, match="build_workers"):
        TuneOptions(build_workers=0)
    with pytest.raises(WoodpeckerError, match="memory budget needs"):
        CompileOptions(memory_budget=1024)
    with pytest.raises(WoodpeckerError, match="unknown schedule"):
        CompileOptions(schedule="fastest")
    with pytest.raises(TypeError, match="unknown compile option"):
        CompileOptions.from_kwargs(enignes="numpy")


def test_search_names_match_the_searchers():
    assert set(SEARCHES) == set(SEARCHERS)


def test_defaults_come_from_config():
    assert TuneOptions().timeout_s == config.CANDIDATE_TIMEOUT_S


def test_keywords_replace_fields_of_the_options():
    base = CompileOptions(engines="onnxruntime,numpy", threads=1)
    merged = CompileOptions.from_kwargs(base, threads=2, tune=TuneOptions("5s"))
    assert merged.engines == ("onnxruntime", "numpy") and merged.threads == 2
    assert merged.tune.budget_s == 5.0


def test_plan_records_the_options_whole(tmp_path):
    opts = CompileOptions(engines="numpy,onnxruntime", threads=1, library_regions=False)
    model = woodpecker.compile(conv_bn_relu_residual(), opts)
    model.save(tmp_path / "p")
    recorded = woodpecker.load(tmp_path / "p").plan.meta["options"]
    assert recorded == opts.to_json()
    assert recorded["engines"] == ["numpy", "onnxruntime"] and recorded["threads"] == 1


@pytest.mark.parametrize("given,seconds", [("20s", 20.0), (20, 20.0), (1.5, 1.5),
                                           (True, TuneOptions().budget_s),
                                           (TuneOptions("3m"), 180.0)])
def test_tune_takes_the_forms_the_cli_does(given, seconds):
    assert CompileOptions(tune=given).tune.budget_s == seconds
    assert CompileOptions.from_kwargs(tune=given).tune.budget_s == seconds
    assert CompileOptions(tune=False).tune is None and CompileOptions(tune=None).tune is None


@pytest.mark.parametrize("bad", ["fast", "0s", -3, [20], {"budget": "5s"}])
def test_a_bad_tune_is_one_error_line(bad):
    with pytest.raises(WoodpeckerError) as e:
        CompileOptions(tune=bad)
    assert "\n" not in str(e.value)
    with pytest.raises(WoodpeckerError, match="bad budget"):
        TuneOptions(True)     # (not 1 second)


def test_a_budget_implies_tuning():
    assert CompileOptions.from_kwargs(budget="30s").tune.budget_s == 30.0
    searched = CompileOptions.from_kwargs(tune=TuneOptions(search="random"), budget=40)
    assert searched.tune.search == "random" and searched.tune.budget_s == 40.0
    base = CompileOptions(tune=TuneOptions("5m", seed=3))
    assert CompileOptions.from_kwargs(base, budget="1m").tune.seed == 3
    with pytest.raises(WoodpeckerError, match="leave one out"):
        CompileOptions.from_kwargs(tune=False, budget="1m")


def test_compile_takes_a_budget_text_for_tune(tmp_path):
    # numpy alone has no generated kernels to tune: the options are all this exercises
    model = woodpecker.compile(conv_bn_relu_residual(), tune="20s", engines="numpy",
                               tuning_log=tmp_path / "t.jsonl")
    assert model.plan.meta["options"]["tune"]["budget_s"] == 20.0


def test_the_cli_budget_alone_implies_tune(tmp_path):
    import onnx

    from woodpecker.cli import main

    onnx.save(conv_bn_relu_residual(), tmp_path / "m.onnx")
    assert main(["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "p"), "--engines",
                 "numpy", "--budget", "7s", "--tuning-log", str(tmp_path / "t.jsonl")]) == 0
    tune = woodpecker.load(tmp_path / "p").plan.meta["options"]["tune"]
    assert tune is not None and tune["budget_s"] == 7.0
    assert main(["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "q"), "--engines",
                 "numpy"]) == 0
    assert woodpecker.load(tmp_path / "q").plan.meta["options"]["tune"] is None


# Each was a raw TypeError/AttributeError from deep inside (or, for a flag, silently true)
@pytest.mark.parametrize("make, words", [
    (lambda: CompileOptions(engines=42), "engines must be names"),
    (lambda: CompileOptions(engines=[42]), "engines must be names"),
    (lambda: CompileOptions(passes=5), "passes must be names"),
    (lambda: CompileOptions(tuning_log=5), "tuning_log must be a path"),
    (lambda: CompileOptions(schedule="memory", memory_budget="big"), "memory_budget"),
    (lambda: CompileOptions(schedule="memory", memory_budget=-5), "memory_budget"),
    (lambda: CompileOptions(arena="no"), "arena must be True or False"),
    (lambda: CompileOptions(library_first="yes"), "library_first must be True or False"),
    (lambda: CompileOptions(force_threads=1), "force_threads must be True or False"),
    (lambda: TuneOptions(seed="x"), "seed must be a whole number"),
    (lambda: TuneOptions(max_trials="x"), "max_trials must be a whole number"),
    (lambda: TuneOptions(build_workers="x"), "build_workers must be a whole number"),
    (lambda: TuneOptions(timeout_s="x"), "timeout_s must be a number"),
    (lambda: TuneOptions(database="no"), "database must be True or False"),
    (lambda: QuantizeOptions(percentile="x"), "percentile must be a number"),
    (lambda: QuantizeOptions(min_layer_sqnr_db="x"), "min_layer_sqnr_db must be a number"),
    (lambda: QuantizeOptions(keep_fp32=5), "keep_fp32 must be names"),
    (lambda: QuantizeOptions(dynamic="yes"), "dynamic must be True or False"),
    (lambda: CompileOptions.from_kwargs("x"), "options must be a CompileOptions"),
    (lambda: CompileOptions.from_kwargs({"threads": 1}), "not a dict"),
])
def test_an_option_of_the_wrong_type_is_one_options_error(make, words):
    with pytest.raises(OptionsError) as e:
        make()
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("make", [lambda: CompileOptions(nosuch=1),
                                  lambda: TuneOptions(nosuch=1),
                                  lambda: QuantizeOptions(nosuch=1),
                                  lambda: CompileOptions.from_kwargs(nosuch=1)])
def test_an_unknown_option_name_is_an_options_error_and_a_type_error(make):
    with pytest.raises(UnknownOption, match="option.s.: nosuch; known: ") as e:
        make()
    assert isinstance(e.value, TypeError) and isinstance(e.value, OptionsError)


def test_the_forms_options_take_are_kept():
    assert CompileOptions(passes="fold_batchnorm, dce").passes == ("fold_batchnorm", "dce")
    assert CompileOptions(arena=np.True_).arena is True
    assert QuantizeOptions(keep_fp32="fc,proj").keep_fp32 == ("fc", "proj")
    assert TuneOptions(max_trials=np.int64(3)).max_trials == 3
    assert CompileOptions(library_first=None).library_first is None


@pytest.mark.parametrize("kwargs, words", [
    (dict(passes=["nosuch"]), "unknown pass(es) nosuch; known:"),       # was KeyError
    (dict(input_shapes=[1, 2]), "input_shapes must be a dict"),         # was TypeError
    (dict(input_shapes={"x": 5}), "input_shapes['x'] must be a tuple of whole numbers"),
    (dict(input_shapes={"x": (1, "a", 6, 6)}), "must be a tuple of whole numbers"),
    (dict(input_values=[1]), "input_values must be a dict"),            # was TypeError
    (dict(input_values={"x": [[1.0, 2.0], [3.0]]}), "input_values['x'] is not an array"),
    (dict(target=42), "target must be 'cpu', 'cuda'"),                  # was AttributeError
    (dict(progress=42), "progress must be a text stream"),              # was AttributeError
    (dict(nosuch_option=1), "unknown compile option(s): nosuch_option"),
])
def test_a_bad_compile_argument_is_one_line_before_any_work(kwargs, words):
    with pytest.raises(OptionsError) as e:
        woodpecker.compile(conv_bn_relu_residual(), **kwargs)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_tuning_log_that_is_a_folder_is_one_line(tmp_path):
    """(It was IsADirectoryError when the log was opened; a log under a file would have
    failed at its first record, after tuning.)"""
    (tmp_path / "afile").write_text("x")
    for log, words in [(tmp_path, "is a folder; name its file"),
                       (tmp_path / "afile" / "t.jsonl", "afile is a file, not a folder")]:
        with pytest.raises(OptionsError, match=words):
            woodpecker.compile(conv_bn_relu_residual(), engines="numpy,halide", threads=1,
                               tuning_log=log)
