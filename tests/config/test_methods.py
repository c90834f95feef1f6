"""The method registry is complete and consistent: every method has an entry, a preset and a README row, every knob
belongs to a method, every named preflight check exists; the labels are made in one place."""

from __future__ import annotations

import dataclasses
import importlib
import re

import pytest

from conftest import CONF_DIR, PROJECT_ROOT
from specbatch.assets import tiny
from specbatch.backends.vllm.methods import TABLE as VLLM_TABLE
from specbatch.backends.vllm.methods import vllm_method
from specbatch.config import (
    CHECKPOINT_KIND,
    CHECKPOINT_METHODS,
    METHODS,
    ConfigError,
    SpecConfig,
    SpecMethod,
    spec_caption,
    spec_label,
)
from specbatch.config.spec import knob_owners
from specbatch.methods import ROLES, methods_owning


def test_every_method_has_an_entry_and_a_preset() -> None:
    assert list(METHODS) == list(SpecMethod)
    assert {p.stem for p in (CONF_DIR / "spec").glob("*.yaml")} == {m.value for m in SpecMethod}


def test_every_knob_is_a_field_and_every_field_belongs_to_a_method() -> None:
    shared = ("method", "num_speculative_tokens", "k_schedule")
    knobs = [f.name for f in dataclasses.fields(SpecConfig) if f.name not in shared]
    assert list(knob_owners()) == knobs, "knob_owners follows the schema's field order"
    for method, entry in METHODS.items():
        assert set(entry.knobs) <= set(knobs), f"{method}: unknown knob in {entry.knobs}"
        assert set(entry.foreign_knob_hints) <= set(knobs) - set(entry.knobs), method
    assert all(knob_owners()[knob] for knob in knobs), "a spec knob no method owns can never be set"
    # The checkpoint and its revision are the checkpoint methods' own.
    assert methods_owning("model") == methods_owning("revision") == CHECKPOINT_METHODS
    assert CHECKPOINT_KIND == {
        SpecMethod.draft_model: "a draft model",
        SpecMethod.eagle: "an EAGLE head",
        SpecMethod.eagle3: "an EAGLE3 head",
        SpecMethod.dflash: "a DFlash draft",
        SpecMethod.dspark: "a DSpark draft",
        SpecMethod.medusa: "a Medusa head",
    }


def test_knob_applies_follows_the_registry() -> None:
    assert SpecConfig.knob_applies(SpecMethod.ngram, "prompt_lookup_min")
    assert not SpecConfig.knob_applies(SpecMethod.suffix, "prompt_lookup_min")
    assert SpecConfig.knob_applies(SpecMethod.mtp, "draft_sample_method")
    assert not SpecConfig.knob_applies(SpecMethod.mtp, "model")
    assert not SpecConfig.knob_applies(SpecMethod.none, "num_speculative_tokens")
    assert SpecConfig.knob_applies(SpecMethod.eagle, "num_speculative_tokens")
    # A k schedule means something only to the methods vLLM follows it for (a sweep drops it for the others).
    assert SpecConfig.knob_applies(SpecMethod.ngram, "k_schedule")
    assert not SpecConfig.knob_applies(SpecMethod.none, "k_schedule")
    for method, entry in METHODS.items():
        if entry.k_schedule_refusal is not None:
            assert not SpecConfig.knob_applies(method, "k_schedule"), method


def test_every_named_preflight_check_exists() -> None:
    # The checks are the functions themselves now (a method module lists them; vLLM's table lists its own).
    assert all(callable(check) for entry in METHODS.values() for check in entry.checks)
    assert all(callable(check) for row in VLLM_TABLE.values() for check in row.checks)
    assert VLLM_TABLE[SpecMethod.suffix.value].environment == {"ARCTIC_INFERENCE_ENABLED": "0"}
    assert [m for m in METHODS if m not in ROLES and VLLM_TABLE[m.value].environment] == [SpecMethod.suffix]


def test_labels() -> None:
    assert spec_label("ngram", 3) == "ngram-k3" and spec_label("none", None) == "none"
    assert spec_caption("ngram", 3) == "ngram k=3" and spec_caption("none", None) == "none"
    schedule = [[1, 4, 5], [5, 16, 3], [17, 256, 0]]
    assert spec_label("ngram", 5, schedule) == "ngram-sched-1to4k5-5to16k3-17to256k0"
    assert spec_caption("ngram", 5, schedule) == "ngram k schedule 1-4:5 5-16:3 17-256:0"
    # A long schedule keeps a folder name short (the digest beside it keeps schedules apart).
    long = [[i, i, 1] for i in range(1, 20)] + [[20, 256, 0]]
    label = spec_label("ngram", 1, long)
    assert label == "ngram-sched-1to1k1-2to2k1-3to3k1-4to4k1-5to5k1-15more" and len(label) < 80


def test_readme_table_lists_every_method() -> None:
    readme = (PROJECT_ROOT / "docs" / "methods.md").read_text()
    section = readme.split("# Speculative methods", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert rows == [m.value for m in SpecMethod]


def test_each_method_module_names_what_exists() -> None:
    # A stand-in is a member the tiny family builds (or adds to an older build); a replay set-up imports, and
    # replays the method that names it.
    buildable = set(tiny.MEMBERS) | set(tiny._ADDABLE)
    for method, entry in METHODS.items():
        assert entry.stand_in is None or entry.stand_in in buildable, method
        if entry.replay is not None:
            module, _, name = entry.replay.partition(":")
            assert getattr(importlib.import_module(module), name).method == method.value
    # Every drafting method has a stand-in, except those the tests run on the embedded model (no checkpoint) and
    # DSpark, which vLLM's CPU build cannot run.
    without = {m.value for m, e in METHODS.items() if m not in ROLES and e.stand_in is None}
    assert without == {"ngram", "suffix", "dspark", "simulate"}


def test_a_method_not_in_a_backends_table_is_refused_naming_what_it_offers(monkeypatch) -> None:
    monkeypatch.delitem(VLLM_TABLE, "medusa")
    with pytest.raises(ConfigError) as err:
        vllm_method(SpecMethod.medusa)
    assert str(err.value) == (
        "spec.method=medusa is not available with vLLM 0.32: it runs "
        "none, ngram, suffix, draft_model, eagle, eagle3, mtp, dflash, dspark, simulate"
    )
