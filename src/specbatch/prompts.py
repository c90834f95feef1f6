"""Turning row texts into the exact token ids the engine gets (chat template or plain text)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specbatch.config import ConfigError, DatasetConfig, ModelConfig
from specbatch.data import SourceRow


@dataclass(frozen=True)
class Prompt:
    row_id: str
    # What the model sees, as text (chat template applied where the data set is chat).
    text: str
    token_ids: list[int]


def load_tokenizer(cfg: ModelConfig) -> Any:
    """The target's HF tokenizer, loaded without the model (cheap), so prompts are checked before the engine."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(
        cfg.tokenizer or cfg.path, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code
    )


def render_prompts(rows: list[SourceRow], cfg: DatasetConfig, tokenizer: Any) -> list[Prompt]:
    if cfg.chat and not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            "dataset.chat=true but the model's tokenizer has no chat template: "
            "use a chat/instruct model or set dataset.chat=false for plain prompts"
        )
    prompts: list[Prompt] = []
    for row in rows:
        if cfg.chat:
            messages = [{"role": "user", "content": row.text}]
            if cfg.system_prompt is not None:
                messages.insert(0, {"role": "system", "content": cfg.system_prompt})
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            # The template already wrote every special token; adding BOS again would change the prompt.
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            text = row.text
            ids = tokenizer(text)["input_ids"]
        prompts.append(Prompt(row_id=row.row_id, text=text, token_ids=list(ids)))
    return prompts


def check_lengths(prompts: list[Prompt], max_tokens: int, max_model_len: int) -> None:
    """Refuse prompts that cannot fit with their completion, before the engine would reject them mid-run."""
    too_long = [p for p in prompts if len(p.token_ids) + max_tokens > max_model_len]
    if too_long:
        first = too_long[0]
        raise ConfigError(
            f"{len(too_long)} prompt(s) do not fit: row {first.row_id!r} has {len(first.token_ids)} prompt tokens + "
            f"sampling.max_tokens={max_tokens} > model.max_model_len={max_model_len}. "
            "Raise model.max_model_len, lower sampling.max_tokens or drop those rows."
        )
