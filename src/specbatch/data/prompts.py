"""Turning a row (and, for multi-turn rows, the model's earlier answers) into the exact token ids sent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specbatch.assets.checkpoints import check_model_source
from specbatch.config import ConfigError, DatasetConfig, ModelConfig
from specbatch.data.rows import SourceRow


@dataclass(frozen=True)
class Prompt:
    row_id: str
    # What the model sees, as text (chat template applied where the data set is chat).
    text: str
    token_ids: list[int]
    # 1-based turn of a multi-turn row; 1 for everything else.
    turn: int = 1
    category: str | None = None
    # The conversation the text was rendered from (chat data sets), for engines that take a chat instead.
    messages: tuple[dict[str, str], ...] | None = None


def load_tokenizer(cfg: ModelConfig) -> Any:
    """The target's HF tokenizer, loaded without the model (cheap), so prompts are checked before the engine.

    It is the first thing that reads model.path (or model.tokenizer): a path or hub id that cannot be loaded
    fails here as a ConfigError naming the key, not as an OS error.
    """
    from transformers import AutoTokenizer

    check_model_source("model.path", cfg.path, cfg.revision)
    key, source = ("model.tokenizer", cfg.tokenizer) if cfg.tokenizer else ("model.path", cfg.path)
    if cfg.tokenizer:
        check_model_source(key, source, cfg.revision, checkpoint=False)
    try:
        return AutoTokenizer.from_pretrained(source, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    except (OSError, ValueError) as exc:  # not found, unreachable hub, gated, no tokenizer files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"{key}={source}: no tokenizer could be loaded ({first}). Point {key} at a local Hugging Face folder "
            "or a hub id available here (without network it must be in the Hugging Face cache)"
        ) from exc


def check_chat_template(cfg: DatasetConfig, tokenizer: Any) -> None:
    if cfg.chat and not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            "dataset.chat=true but the model's tokenizer has no chat template: "
            "use a chat/instruct model or set dataset.chat=false for plain prompts"
        )


def conversation(row: SourceRow, turn: int, answers: list[str], cfg: DatasetConfig) -> list[dict[str, str]]:
    """The chat for ``turn`` of ``row``: earlier user turns each followed by the model's own answer."""
    if row.messages is not None:
        messages = list(row.messages)
    elif row.turns is not None:
        messages = []
        for user, answer in zip(row.turns[: turn - 1], answers, strict=True):
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        messages.append({"role": "user", "content": row.turns[turn - 1]})
    else:
        messages = [{"role": "user", "content": row.text or ""}]
    if cfg.system_prompt is not None and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": cfg.system_prompt})
    return messages


def render(row: SourceRow, turn: int, answers: list[str], cfg: DatasetConfig, tokenizer: Any) -> Prompt:
    messages = None
    if cfg.chat:
        messages = tuple(conversation(row, turn, answers, cfg))
        text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        # The template already wrote every special token; adding BOS again would change the prompt.
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        text = row.text or ""
        ids = tokenizer(text)["input_ids"]
    return Prompt(row.row_id, text, list(ids), turn=turn, category=row.category, messages=messages)


def longest_token_chars(tokenizer: Any) -> int:
    """Characters of the tokenizer's longest token: no token covers more text than that. Cached per tokenizer."""
    cached = getattr(tokenizer, "_specbatch_longest_token_chars", None)
    if cached is None:
        tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        # Byte-level vocabularies spell a byte as one character: the count is an upper bound on the text covered.
        cached = max((len(t) for t in tokens if isinstance(t, str)), default=1) or 1
        tokenizer._specbatch_longest_token_chars = cached
    return cached


def oversized_error(row: SourceRow, answers: list[str], tokenizer: Any, max_model_len: int) -> str | None:
    """Why a row cannot fit before it is tokenized at all, or None: its text has more characters than
    ``max_model_len`` tokens of the longest kind could hold. Tokenizing a 200 MB line whole took ~150x its size in
    memory (the job was OOM-killed, and again on every rerun); this counts characters only."""
    parts = [row.text or ""] + [m.get("content") or "" for m in row.messages or []] + list(row.turns or []) + answers
    chars = sum(len(part) for part in parts if isinstance(part, str))
    limit = max_model_len * longest_token_chars(tokenizer)
    if chars > limit:
        return (
            f"prompt too long: {chars:,} characters cannot fit model.max_model_len={max_model_len} tokens (at most "
            f"{limit:,} characters with this tokenizer); shorten the row or raise model.max_model_len"
        )
    return None


def length_error(prompt: Prompt, max_tokens: int, max_model_len: int) -> str | None:
    """Why a prompt cannot fit with its completion, or None; such a row is recorded, not sent."""
    if len(prompt.token_ids) + max_tokens > max_model_len:
        return (
            f"prompt too long: {len(prompt.token_ids)} prompt tokens + sampling.max_tokens={max_tokens} > "
            f"model.max_model_len={max_model_len}; raise model.max_model_len or lower sampling.max_tokens"
        )
    return None
