"""What the backends whose jobs are vLLM's have in common: vLLM's rules about the config, and ``vllm serve`` as the
command that serves a winning set-up. The offline engine runs vLLM itself, the server backend talks to a vLLM (or
Dynamo-on-vLLM) server that ``jobs/serve.py`` starts from the same config, and the dummy stands in for vLLM in tests.
"""

from __future__ import annotations

from specbatch.backends.vllm.methods import check_method
from specbatch.backends.vllm.serve_commands import vllm_console_script_broken, vllm_serve_command
from specbatch.backends.vllm.vllm_args import check_vllm_rules, largest_batch, seeded_prefills_must_stay_whole
from specbatch.config import JobConfig, engine_identity
from specbatch.engine.base import Engine


class VllmFamily(Engine):
    """An engine whose config is checked by vLLM's rules and whose set-up is served by ``vllm serve``."""

    @classmethod
    def validate(cls, job: JobConfig) -> None:
        super().validate(job)
        check_vllm_rules(job)

    @classmethod
    def fingerprint_of(cls, job: JobConfig) -> str:
        # Whether prompts are prefilled whole (a seeded sampled job on a machine without a GPU) comes from the
        # sampling, yet changes how the engine is built.
        whole = "+whole-prefills" if seeded_prefills_must_stay_whole(job) else ""
        return engine_identity(job) + whole

    @classmethod
    def check_method(cls, job: JobConfig) -> None:
        check_method(job)

    @classmethod
    def batch(cls, job: JobConfig) -> int | None:
        return largest_batch(job)[0]

    @classmethod
    def serve_command(cls, job: JobConfig) -> str:
        return vllm_serve_command(job, module=vllm_console_script_broken())
