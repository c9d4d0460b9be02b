"""Bad inputs, second round (issue 33, deliverables 4 and 5): one test per row of
docs/faults.md marked V.

Config values from the command line are typed once, by the schema (core/config_cli.py), and
values that would make a stage measure nothing or garbage, or that the server cannot serve,
are refused before any job runs (core/config.py, stages/decode/decode_plan.py); a measured
peaks record that no machine could have measured is refused when read.
"""

import copy
import functools
import json

import pytest
from helpers import ROOT
from helpers import default_config as _load_default_config
from studylib.core.config import (
    config_warnings,
    key_problems,
    schema_problem,
    strict_schema_problem,
)
from studylib.core.config_cli import CliValueError, apply_cli_values, cli_values
from studylib.core.table_registry import DamagedFile, check_inputs
from studylib.study_config import check_config
from test_faults import _set

SCHEMA = str(ROOT / "config" / "schema.yaml")


@functools.cache
def _default():
    return _load_default_config()


def default_config() -> dict:
    """The default config with the schema's defaults (read once; each test its own copy)."""
    return copy.deepcopy(_default())


# --- --config values typed by the schema -----------------------------------------------------

ENV = "decode.variants.transformers.env.STUDY_TAG"
TYPED = [
    # (id, --config entry, key, value the config gets)
    ("quoted-octal-env", 'decode={variants: {transformers: {env: {STUDY_TAG: "0755"}}}}', ENV,
     "0755"),
    ("plain-octal-env", "decode={variants: {transformers: {env: {STUDY_TAG: 0755}}}}", ENV, "0755"),
    ("quoted-yes-env", 'decode={variants: {transformers: {env: {STUDY_TAG: "yes"}}}}', ENV, "yes"),
    ("number-env", "decode={variants: {transformers: {env: {STUDY_TAG: 3}}}}", ENV, 3),
    ("ipv6-any-host", 'decode={host: "::"}', "decode.host", "::"),
    ("ipv6-loopback-host", 'decode={host: "::1"}', "decode.host", "::1"),
    ("quoted-port", 'decode={port: "30117"}', "decode.port", 30117),
    ("boolean-yes", "decode={variants: {transformers: {enabled: yes}}}",
     "decode.variants.transformers.enabled", True),
    ("number-with-exponent", "decode={min_steady_s: {cpu: 5e-1, cuda: 30}}",
     "decode.min_steady_s.cpu", 0.5),
    ("server-args", "decode={variants: {transformers: {args: {cpu: [--device, cpu, --x, 0.85, "
     "--y, 1e3]}}}}", "decode.variants.transformers.args.cpu",
     ["--device", "cpu", "--x", 0.85, "--y", "1e3"]),
    ("top-level-digits", "compare_baseline=2026", "compare_baseline", "2026"),
    ("top-level-empty", "compare_baseline=", "compare_baseline", ""),
    ("null", "moe={expert_histogram: null}", "moe.expert_histogram", None),
    ("quoted-null", 'moe={expert_histogram: "null"}', "moe.expert_histogram", "null"),
]  # fmt: skip


def _get(config, path):
    for key in path.split("."):
        config = config[key]
    return config


@pytest.mark.parametrize("entry, path, value", [t[1:] for t in TYPED], ids=[t[0] for t in TYPED])
def test_a_config_value_is_typed_once_by_the_schema(entry, path, value):
    config = default_config()
    apply_cli_values(config, cli_values([entry]))
    got = _get(config, path)
    assert got == value and type(got) is type(value), got
    assert schema_problem(config, SCHEMA).startswith("the config does not match")  # none found


def test_the_rest_of_a_mapping_given_on_the_command_line_is_kept():
    config = default_config()
    apply_cli_values(config, cli_values(['decode={host: "::1"}', "decode={port: 30117}"]))
    assert config["decode"]["host"] == "::1" and config["decode"]["port"] == 30117
    assert config["decode"]["variants"]["transformers"]["engine"] == "transformers"


def test_an_ipv6_any_address_is_warned_as_public_and_named_in_quotes():
    config = default_config()
    apply_cli_values(config, cli_values(['decode={host: "::"}']))
    assert config_warnings(config) == [
        'decode.host "::": the decode server listens beyond this machine and has no '
        "authentication: anyone who reaches it can use it"
    ]


@pytest.mark.parametrize("host", ["127.0.0.2", "::1", "localhost"])
def test_a_loopback_host_is_not_warned_about(host):
    config = default_config()
    config["decode"]["host"] = host
    assert check_config(config) == [] and config_warnings(config) == []


def test_the_server_gets_the_environment_as_written(tmp_path):
    from studylib.instruments.serving.engines import engine
    from studylib.stages.decode.decode_plan import decode_plan, resolve_for_device
    from studylib.stages.decode.decode_server import ServerPass
    from test_serving import free_port

    config = default_config()
    config["device"] = "cpu"
    entry = 'decode={variants: {transformers: {env: {STUDY_TAG: "0755"}}}}'
    apply_cli_values(config, cli_values([entry, f"decode={{port: {free_port()}}}"]))
    plan = resolve_for_device(decode_plan(config, "transformers"), "cpu")
    pas = ServerPass({**plan, "model": str(tmp_path)}, engine("transformers"), tmp_path, "s.log")
    assert pas.env["STUDY_TAG"] == "0755"


def test_a_mapping_that_is_not_yaml_is_one_line():
    with pytest.raises(CliValueError) as error:
        cli_values(["decode={host: ::1}"])
    assert str(error.value) == (
        "--config decode={host: ::1}: not YAML at column 8 (expected the node content, but "
        "found ':'): quote a value that holds YAML's special characters (: , [ ] { } #), as in "
        'host: "::1"'
    )


@pytest.mark.parametrize("entry, message", [
    ("decode={port: 1.5}", "config key decode.port: '1.5' is not of type 'integer'"),
    ("decode={ready_timeout_s: .inf}",
     "config key decode.ready_timeout_s: '.inf' is not of type 'number'"),
])  # fmt: skip
def test_a_value_the_schema_refuses_is_left_as_written_for_it_to_name(entry, message):
    config = default_config()
    apply_cli_values(config, cli_values([entry]))
    assert schema_problem(config, SCHEMA) == message


# --- values that measure nothing or garbage ---------------------------------------------------


def _args(variant, device, args):
    return _set(f"decode.variants.{variant}.args.{device}", args)


def _recording(mutate):
    """``mutate`` with the bf16 graphs variant's recorder pass on (off in the default)."""

    def both(config):
        config["decode"]["variants"]["sglang-bf16-graphs"]["expert_distribution"] = True
        mutate(config)

    return both


GARBAGE = [
    ("rel-err-max-0", _set("check.rel_err_max.fp32", 0),
     "check.rel_err_max.fp32: 0 passes only an exact result: every point whose result is "
     "rounded would be a mismatch"),
    ("cos-sim-min-1", _set("check.cos_sim_min.bf16", 1),
     "check.cos_sim_min.bf16: 1 passes only an exact result"),
    ("max-samples-3", lambda c: c["timing"].update(min_samples=2, max_samples=3),
     "timing.max_samples (3): quartiles need 4 samples; with fewer every time has a spread of 0"),
    ("point-timeout-under-min-time", _set("timing.point_timeout_s", 0.01),
     "timing.point_timeout_s (0.01) is not above timing.min_time_s (0.05): each mode of a point "
     "samples at least min_time_s, so every point would be stopped as a hang"),
    ("output-len-1", _set("decode.output_len.cpu", 1),
     "decode.output_len.cpu: 1 token has no time per output token (TPOT is the time between a "
     "request's tokens): give 2 or more"),
    ("preaged-lockstep", lambda c: c["decode"].update(preaged={"cuda": False, "cpu": True},
                                                      stagger={"cuda": True, "cpu": False}),
     "decode.preaged.cpu: pre-aged first requests are a staggered load's (their lengths are "
     "its slots); turn decode.stagger.cpu on or this off"),
    ("input-len-beyond-positions", _set("decode.input_len.cpu", 5000),
     "decode.input_len.cpu (5000) + decode.output_len.cpu (32) = 5032 tokens per request, "
     "beyond the 4096 positions of variant transformers's model "
     "(decode.model.cpu.max_position_embeddings, default 4096): the model cannot serve that "
     "context"),
    ("input-len-beyond-given-positions",
     lambda c: c["decode"]["model"]["cpu"].update(max_position_embeddings=40),
     "= 48 tokens per request, beyond the 40 positions of variant transformers's model "
     "(decode.model.cpu.max_position_embeddings)"),
    ("context-length-arg", _args("sglang-fp8-graphs", "cuda", ["--context-length", "1000"]),
     "decode.input_len.cuda (128) + decode.output_len.cuda (1024) = 1152 tokens per request, "
     "beyond the 1000 positions of variant sglang-fp8-graphs's model (--context-length in its "
     "args)"),
    ("recorded-window-0", _recording(_set("decode.expert_distribution_s.cuda", 0)),
     "decode.expert_distribution_s.cuda: a 0 s recorded window records no expert (variant "
     "sglang-bf16-graphs records them); give it more than 0"),
    ("qwen3-with-shared-experts", _set("decode.model.cpu.shared_experts", 1),
     "decode.model.cpu.shared_experts (1): qwen3_moe has no shared experts; give 0 or "
     "architecture glm4_moe"),
    ("recorder-top-k-not-the-models", _recording(_set("decode.model.cuda.top_k", 4)),
     "decode.variants.sglang-bf16-graphs.top_k (8) is not the top_k of the model it serves on "
     "cuda (decode.model.cuda.top_k: 4): its recorded tokens per expert would be off by their "
     "ratio"),
    ("host-in-brackets", _set("decode.host", "[::1]"),
     "decode.host [::1]: write an IPv6 address without brackets (::1); the study brackets it "
     "where it builds a URL"),
    ("host-with-port", _set("decode.host", "127.0.0.1:30000"),
     "decode.host 127.0.0.1:30000: not a host name or IP address (the port goes in decode.port)"),
    ("host-as-url", _set("decode.host", "http://localhost"),
     "decode.host 'http://localhost': a host name or IP address, not a URL or a path"),
    ("host-empty", _set("decode.host", ""),
     "decode.host is empty: give the address the server listens on (127.0.0.1)"),
]  # fmt: skip


@pytest.mark.parametrize("mutate, message", [g[1:] for g in GARBAGE], ids=[g[0] for g in GARBAGE])
def test_a_value_that_measures_nothing_or_garbage_is_one_line(mutate, message):
    config = default_config()
    mutate(config)
    problems = check_config(config)
    assert len(problems) == 1 and message in problems[0], problems
    assert "\n" not in problems[0]


def test_a_model_paths_own_positions_bound_its_context(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 2048}))
    config = default_config()
    config["decode"]["variants"]["served"] = {"engine": "sglang", "model": str(tmp_path),
                                              "devices": ["cuda"]}  # fmt: skip
    assert check_config(config) == []  # 128 + 1024 tokens fit in 2048
    config["decode"]["output_len"]["cuda"] = 3000
    assert check_config(config) == [
        "decode.input_len.cuda (128) + decode.output_len.cuda (3000) = 3128 tokens per request, "
        "beyond the 2048 positions of variant served's model "
        f"(max_position_embeddings in {tmp_path}/config.json): the model cannot serve that context"
    ]


# --- flags the study sets itself --------------------------------------------------------------

ARGS = [
    ("repeats-port", _args("transformers", "cpu", ["--device", "cpu", "--port", "30001"]),
     "decode.variants.transformers.args.cpu: --port is set by the study itself (decode.port): "
     "remove it from args"),
    ("repeats-port-with-equals", _args("transformers", "cpu", ["--port=30001"]),
     "decode.variants.transformers.args.cpu: --port is set by the study itself"),
    ("repeats-host", _args("transformers", "cpu", ["--host", "0.0.0.0"]),
     "--host is set by the study itself (decode.host)"),
    ("model-path", _args("sglang-fp8-graphs", "cuda", ["--model-path", "/m"]),
     "decode.variants.sglang-fp8-graphs.args.cuda: --model-path is set by the study itself (the "
     "variant's model)"),
    ("load-format-of-a-dummy-model", _args("sglang-bf16-graphs", "cuda", ["--load-format", "auto"]),
     "--load-format is set by the study itself (model: dummy, served with random weights)"),
    ("recorder-mode", _recording(_args("sglang-bf16-graphs", "cuda",
                                       ["--expert-distribution-recorder-mode", "stat"])),
     "--expert-distribution-recorder-mode is set by the study itself (expert_distribution: true, "
     "on its recorder pass)"),
    ("flag-twice", _args("transformers", "cpu", ["--device", "cpu", "--device", "cuda"]),
     "decode.variants.transformers.args.cpu: --device is given twice (arguments 1 and 3): give "
     "it once"),
]  # fmt: skip


@pytest.mark.parametrize("mutate, message", [a[1:] for a in ARGS], ids=[a[0] for a in ARGS])
def test_args_that_repeat_a_flag_are_refused_before_any_job(mutate, message):
    config = default_config()
    mutate(config)
    problems = check_config(config)
    assert len(problems) == 1 and message in problems[0], problems


def test_a_served_name_in_args_is_replaced_not_refused():
    """The study names the served model itself (readiness knows the server is this run's):
    a configured --served-model-name is replaced, as Engine.argv documents."""
    config = default_config()
    _args("sglang-bf16-eager", "cuda", ["--served-model-name", "mine"])(config)
    assert check_config(config) == []


# --- a measured peaks record no machine could have measured ----------------------------------

PEAKS = [
    ("negative", "-5", "key copy_gbps: -5 is not a measured peak: no measured peak is 0 or below; "
     "a damaged or edited record"),
    ("zero", "0", "key copy_gbps: 0 is not a measured peak: no measured peak is 0 or below"),
    ("nan", "NaN", "key copy_gbps: nan is not a measured peak: NaN is no measurement"),
    ("absurd", "1e9", "key copy_gbps: 1000000000.0 is not a measured peak: no one device reaches "
     "it (at most 100000)"),
    ("infinite", "Infinity", "key copy_gbps: inf is not a measured peak: no one device reaches it"),
]  # fmt: skip


@pytest.mark.parametrize("value, message", [p[1:] for p in PEAKS], ids=[p[0] for p in PEAKS])
def test_a_peaks_record_no_machine_measured_is_refused_when_read(tmp_path, value, message):
    peaks = tmp_path / "results" / "peaks.json"
    peaks.parent.mkdir()
    peaks.write_text(f'{{"device": "cpu", "copy_gbps": {value}, "bf16_tflops": 1.0}}')
    with pytest.raises(DamagedFile) as error:
        check_inputs([str(peaks)])
    assert str(error.value).startswith(f"{peaks}: {message}"), str(error.value)
    assert "\n" not in str(error.value)


def test_a_negative_compute_peak_is_refused_too_and_an_unmeasured_one_is_fine(tmp_path):
    peaks = tmp_path / "peaks.json"
    peaks.write_text('{"device": "cpu", "copy_gbps": 10.0, "bf16_tflops": -1, "fp8_tflops": null}')
    with pytest.raises(DamagedFile, match="key bf16_tflops: -1 is not a measured peak"):
        check_inputs([str(peaks)])
    peaks.write_text('{"device": "cpu", "copy_gbps": 10.0, "bf16_tflops": 0.5, "fp8_tflops": null}')
    assert check_inputs([str(peaks)]) == {str(peaks): 1}


# --- a hostile user's values (rows 166-173) -------------------------------------------------


def _strict(mutate) -> str | None:
    config = default_config()
    mutate(config)
    assert schema_problem(config, SCHEMA) == "the config does not match config/schema.yaml"
    return strict_schema_problem(config, SCHEMA)


STRICT = [
    # (id, mutation, message): JSON Schema passes each; the study cannot mean it
    ("whole-float-m", _set("m_grid.cpu", [1.0, 16]),
     "config key m_grid.cpu[0]: 1.0 is not a whole number as the study reads one (it would "
     "reach the kernels as a float): write 1"),
    ("nan", _set("timing.min_time_s", float("nan")),
     "config key timing.min_time_s: nan is not a finite number: NaN or infinity measures "
     "nothing, or never ends; give a number"),
    ("inf-max-time", _set("timing.max_time_s.cpu", float("inf")),
     "config key timing.max_time_s.cpu: inf is not a finite number"),
    ("inf-loop", _set("kernel_power.seconds.cpu", float("inf")),
     "config key kernel_power.seconds.cpu: inf is not a finite number"),
    ("whole-float-port", _set("decode.port", 30000.0),
     "config key decode.port: 30000.0 is not a whole number as the study reads one"),
]  # fmt: skip


@pytest.mark.parametrize("mutate, message", [s[1:] for s in STRICT], ids=[s[0] for s in STRICT])
def test_what_json_schema_lets_through_is_refused_before_any_job(mutate, message):
    problem = _strict(mutate)
    assert problem is not None and problem.startswith(message), problem


def test_the_default_config_is_strict_already():
    assert strict_schema_problem(default_config(), SCHEMA) is None


@pytest.mark.parametrize("key, shown", [(123, "the key 123 is a number, not a name: quote it "
                                         '("123")'),
                                        (True, 'the key True is a boolean, not a name: quote it '
                                         'as written, e.g. "on"')])  # fmt: skip
def test_a_key_that_is_no_name_is_refused_before_anything_hashes_it(key, shown):
    config = default_config()
    config["decode"]["variants"]["transformers"]["env"] = {key: "x", "OK": "y"}
    assert key_problems(config) == [
        f"config key decode.variants.transformers.env: {shown}"
        + (" (YAML reads an unquoted yes, no, on, off, true or false as a boolean)"
           if key is True else "")
    ]  # fmt: skip
    assert key_problems(default_config()) == []


def test_an_m_that_makes_an_operand_beyond_2_to_the_31_is_refused():
    config = default_config()
    config["m_grid"]["cpu"] = [1, 10**20]
    assert check_config(config) == [
        "m_grid.cpu: M 100000000000000000000 makes an operand of 6.14e+23 elements on shape "
        "down (N 6144, K 2048; backends.torch.cases[1]), beyond the 2^31 (8 GiB in fp32) a "
        "point's input or output may hold: a typo?"
    ]
    config = default_config()
    config["kernel_power"]["backends"]["torch"][0]["M"] = [10**12]
    (problem,) = check_config(config)
    assert problem.startswith("kernel_power.backends.torch[0].M: M 1000000000000 makes an "
                              "operand of")  # fmt: skip
    # the largest grids the examples measure pass (grouped weights are not bounded: G x K x N)
    assert check_config(default_config()) == []


def test_a_variant_name_too_long_for_a_file_name_is_refused():
    config = default_config()
    name = "v" + "0123456789abcdef" * 19  # 305 characters, as a path component: ENAMETOOLONG
    config["decode"]["variants"][name] = dict(config["decode"]["variants"]["transformers"])
    (problem,) = [p for p in check_config(config) if "a name of" in p]
    assert problem == (f"decode.variants.{name[:20]}...: a name of 305 characters; a variant's "
                       "name names its folder and files (results/decode/<name>/, results/logs/"
                       "decode/<name>.log): give at most 100")  # fmt: skip


SCHEMA_REFUSED = [
    ("duplicate-m", _set("m_grid.cpu", [1, 1]), "config key m_grid.cpu: [1, 1] has non-unique "
     "elements"),
    ("duplicate-concurrency", _set("decode.concurrency.cpu", [2, 2]),
     "config key decode.concurrency.cpu: [2, 2] has non-unique elements"),
    ("negative-m", _set("m_grid.cpu", [-4]), "config key m_grid.cpu[0]: -4 is less than the "
     "minimum of 1"),
    ("k-zero", _set("shapes.down.K", 0), "config key shapes.down.K: 0 is less than the minimum "
     "of 1"),
    ("concurrency-zero", _set("decode.concurrency.cpu", [0]),
     "config key decode.concurrency.cpu[0]: 0 is less than the minimum of 1"),
]  # fmt: skip


@pytest.mark.parametrize("mutate, message", [s[1:] for s in SCHEMA_REFUSED],
                         ids=[s[0] for s in SCHEMA_REFUSED])  # fmt: skip
def test_grids_and_shapes_out_of_range_are_named_by_the_schema(mutate, message):
    config = default_config()
    mutate(config)
    assert schema_problem(config, SCHEMA) == message


def test_a_dtype_an_op_does_not_take_and_no_backend_at_all_are_named():
    config = default_config()
    config["backends"]["torch"]["cases"][0]["dtypes"] = ["nvfp4"]
    assert ("backends.torch.cases[0].dtypes: torch matmul does not take 'nvfp4'; known: "
            in " ".join(check_config(config)))  # fmt: skip
    config = default_config()
    for spec in config["backends"].values():
        spec["enabled"] = False
    assert "backends: every backend is disabled; enable at least one" in check_config(config)
