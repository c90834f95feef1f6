"""What the backends whose jobs are vLLM's have in common: vLLM's rules about the config, and ``vllm serve`` as the
command that serves a winning set-up. The offline engine runs vLLM itself, the server backend talks to a vLLM (or
Dynamo-on-vLLM) server that ``jobs/serve.py`` starts from the same config, and the dummy stands in for vLLM in tests.
"""

from __future__ import annotations

from specbatch.backends.vllm.methods import check_method
from specbatch.config import JobConfig
from specbatch.engine.base import Engine
from specbatch.serving.command_lines import vllm_console_script_broken, vllm_serve_command
from specbatch.serving.vllm_args import check_vllm_rules, largest_batch


class VllmFamily(Engine):
    """An engine whose config is checked by vLLM's rules and whose set-up is served by ``vllm serve``."""

    @classmethod
    def validate(cls, job: JobConfig) -> None:
        super().validate(job)
        check_vllm_rules(job)

    @classmethod
    def check_method(cls, job: JobConfig) -> None:
        check_method(job)

    @classmethod
    def batch(cls, job: JobConfig) -> int | None:
        return largest_batch(job)[0]

    @classmethod
    def serve_command(cls, job: JobConfig) -> str:
        return vllm_serve_command(job, module=vllm_console_script_broken())
