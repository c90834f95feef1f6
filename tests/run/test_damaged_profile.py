"""A damaged speculation profile (issue 65) is refused in one line naming its file and the field, by every reader:
spec=simulate before anything loads (methods.simulate.read_profile_file) and a run's records
(records.profile_file.read_profile), both through the one check, profile_schema.schema_problems. Before, a string of
rates ran at acceptance 0 and other fields gave tracebacks or lines naming neither file nor field."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import PROJECT_ROOT, compose_job, run_generate
from specbatch.common.errors import ConfigError
from specbatch.run.profile_schema import build_profile
from specbatch.run.records.profile_file import read_profile
from specbatch.run.records.record_files import RecordError

# A profile of format 1, as main wrote it at 58217585 (test_speculation_profile reads it whole).
FORMAT_1 = PROJECT_ROOT / "tests" / "fixtures" / "speculation_profile_58217585" / "speculation_profile.json"

Change = Callable[[dict[str, Any]], Any]


def whole(k: int = 3) -> dict[str, Any]:
    """A profile as a run writes it: k=3, 8 steps that accepted 0..3 tokens 3, 2, 2 and 1 times (k=1: 1 and 9),
    drafting at 80 % of steps."""
    histogram = [3, 2, 2, 1] if k == 3 else [1, 9]
    return build_profile(histogram, k, method="ngram", measured=True, target_model=None, ours={"draft_coverage": 0.8})


def write(path: Path, profile: dict[str, Any]) -> Path:
    # json.dumps writes NaN and Infinity as Python's json.loads reads them back.
    path.write_text(json.dumps(profile))
    return path


def rates(*values: Any) -> Change:
    return lambda p: p.update(marginal_accept_rates=list(values))


def ours(**figures: Any) -> Change:
    return lambda p: p["specbatch"].update(figures)


def monotonicity(check: Any) -> Change:
    return lambda p: p["validation"].update(marginal_monotonicity=check)


# (the change, the field the refusal names): what a hostile user wrote into a whole k=3 profile.
DAMAGE: dict[str, tuple[Change, str]] = {
    "validation true": (lambda p: p.update(validation=True), "validation is true"),
    "coverage a string": (ours(draft_coverage="abc"), 'specbatch.draft_coverage is "abc"'),
    "coverage a bool": (ours(draft_coverage=True), "specbatch.draft_coverage is true"),
    "coverage above 1": (ours(draft_coverage=1.5), "specbatch.draft_coverage is 1.5"),
    "coverage infinite": (ours(draft_coverage=math.inf), "specbatch.draft_coverage is Infinity"),
    "ours not an object": (lambda p: p.update(specbatch=[0.8]), "specbatch is [0.8]"),
    "k a string": (lambda p: p.update(num_speculative_tokens="3"), 'num_speculative_tokens is "3"'),
    "k a bool": (lambda p: p.update(num_speculative_tokens=True), "num_speculative_tokens is true"),
    "k a float": (lambda p: p.update(num_speculative_tokens=3.0), "num_speculative_tokens is 3.0"),
    "k zero": (lambda p: p.update(num_speculative_tokens=0), "num_speculative_tokens is 0"),
    "k negative": (lambda p: p.update(num_speculative_tokens=-3), "num_speculative_tokens is -3"),
    "a rate null": (rates(0.625, None, 0.125), "marginal_accept_rates[1] is null"),
    "a rate NaN": (rates(math.nan, 0.375, 0.125), "marginal_accept_rates[0] is NaN"),
    "a rate a bool": (rates(True, 0.375, 0.125), "marginal_accept_rates[0] is true"),
    "a rate a string": (rates(0.625, "0.375", 0.125), 'marginal_accept_rates[1] is "0.375"'),
    "a rate above 1": (rates(1.5, 0.375, 0.125), "marginal_accept_rates[0] is 1.5"),
    "a rate negative": (rates(0.625, 0.375, -0.1), "marginal_accept_rates[2] is -0.1"),
    "rates shorter than k": (rates(0.625, 0.375), "marginal_accept_rates has 2 rates"),
    "rates longer than k": (rates(0.625, 0.375, 0.125, 0.1), "marginal_accept_rates has 4 rates"),
    "rates increasing": (rates(0.125, 0.375, 0.625), "marginal_accept_rates [0.125, 0.375, 0.625] increase"),
    "conditional rates a string": (lambda p: p.update(conditional_accept_rates="0.6"), "conditional_accept_rates"),
    "monotonicity not an object": (monotonicity(True), "validation.marginal_monotonicity is true"),
    "monotonicity's verdict a string": (
        monotonicity({"passed": "yes", "violations": []}),
        'validation.marginal_monotonicity.passed is "yes"',
    ),
    "accept_length_model a number": (lambda p: p.update(accept_length_model=1), "accept_length_model is 1"),
    "verification_method null": (lambda p: p.update(verification_method=None), "verification_method is null"),
    "mean NaN": (lambda p: p.update(mean_accept_length=math.nan), "mean_accept_length is NaN"),
    "mean below 1": (lambda p: p.update(mean_accept_length=0.5), "mean_accept_length is 0.5"),
    "a negative count": (
        lambda p: p["acceptance_length_histogram"].update({"2": -2}),
        'acceptance_length_histogram["2"] is -2',
    ),
    "schema_version a number": (lambda p: p.update(schema_version=1.0), "schema_version"),
}


def refusal(reader: Callable[[], Any], error: type[Exception] = ConfigError) -> str:
    with pytest.raises(error) as refused:
        reader()
    message = str(refused.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize(("change", "field"), DAMAGE.values(), ids=DAMAGE.keys())
def test_every_reader_refuses_a_damaged_field_naming_the_file_and_the_field(
    tmp_path: Path, change: Change, field: str
) -> None:
    profile = whole()
    change(profile)
    path = write(tmp_path / "speculation_profile.json", profile)
    simulate = refusal(lambda: compose_job(["spec=simulate", f"spec.profile={path}"]))
    assert simulate.startswith(f"spec.profile={path}") and field in simulate, simulate
    assert "measure it again" in simulate or "measure the profile again" in simulate, simulate
    # A run folder names the file it took.
    run = tmp_path / "run"
    (run / "merged").mkdir(parents=True)
    write(run / "merged" / "speculation_profile.json", profile)
    in_folder = refusal(lambda: compose_job(["spec=simulate", f"spec.profile={run}"]))
    assert f"({run / 'merged' / 'speculation_profile.json'})" in in_folder and field in in_folder, in_folder
    # A run's own records: status, merge and a rerun find it damaged, and rebuild it from the rows. A profile whose
    # rates increase is a profile ModelOpt's check failed, not a damaged file: only spec=simulate refuses it.
    if "increase" not in field:
        record = refusal(lambda: read_profile(path), RecordError)
        assert record.startswith(f"{path} is damaged") and field in record, record


def test_the_issues_string_of_rates_no_longer_runs_at_acceptance_0(tmp_path: Path) -> None:
    # k=1 and "0.9": the string's first character became the rate 0.0, and the job finished with rc 0.
    profile = {**whole(k=1), "marginal_accept_rates": "0.9"}
    path = write(tmp_path / "p.json", profile)
    message = refusal(lambda: compose_job(["spec=simulate", f"spec.profile={path}"]))
    assert 'marginal_accept_rates is "0.9", not a list or null' in message, message


def test_a_profile_that_drafted_at_no_step_is_nothing_to_simulate(tmp_path: Path) -> None:
    profile = whole()
    ours(draft_coverage=0)(profile)
    path = write(tmp_path / "p.json", profile)
    assert read_profile(path) == profile, "a whole record of a run whose drafter found nothing"
    message = refusal(lambda: compose_job(["spec=simulate", f"spec.profile={path}"]))
    assert message.startswith(f"spec.profile={path}: specbatch.draft_coverage is 0"), message


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"k": "3"}, 'k is "3"'),
        ({"k": True}, "k is true"),
        ({"drafts": None}, "drafts is null"),
        ({"drafts": -8}, "drafts is -8"),
        ({"accepted_per_position": "531"}, 'accepted_per_position is "531"'),
        ({"accepted_per_position": [5, -3, 1]}, "accepted_per_position is [5, -3, 1]"),
        ({"categories": {"chat": 3}}, "categories.chat is 3"),
        ({"categories": {"chat": {"drafts": 2, "accepted_per_position": None}}}, "categories.chat.accepted_per"),
        ({"method": 3}, "method is 3"),
        ({"model": ["org", "model"]}, 'model is ["org", "model"]'),
    ],
)
def test_a_damaged_profile_of_format_1_is_refused_naming_the_field(tmp_path: Path, change: dict, field: str) -> None:
    path = tmp_path / "speculation_profile.json"
    path.write_text(json.dumps({**json.loads(FORMAT_1.read_text()), **change}))
    message = refusal(lambda: read_profile(path), RecordError)
    assert message.startswith(f"{path} is damaged (a profile of format 1: {field}"), message


def test_the_job_refuses_a_damaged_profile_in_one_line_before_any_run_folder(tmp_path: Path) -> None:
    profile = {**whole(k=1), "marginal_accept_rates": "0.9"}
    path = write(tmp_path / "speculation_profile.json", profile)
    outputs = tmp_path / "outputs"
    args = ["spec=simulate", f"spec.profile={path}", "engine.backend=dummy", "tracking=off", f"output_root={outputs}"]
    result = run_generate(args, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    [line] = [line for line in output.splitlines() if "[ERROR]" in line]
    assert f"spec.profile={path} is damaged: marginal_accept_rates is" in line, line
    assert "Traceback" not in output and "Could not create instance" not in output, output[-3000:]
    assert not (outputs / "runs").exists(), "no run folder"
