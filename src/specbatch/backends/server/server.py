"""The server backend: the shard's requests go to a running OpenAI-compatible server (``engine.backend=server``).

A vLLM server started by ``jobs/serve.py`` with the same overrides, a Dynamo frontend, an SGLang or llama.cpp server:
anything at ``engine.url`` that speaks the OpenAI API. Prompts go as the offline job's exact token ids to the
completions API when the server takes them (``engine.api=auto`` finds out before anything is written), to the chat
API otherwise (the server then applies its own chat template).

The HTTP side is the ``openai`` client: async, with its own retries and exponential backoff on connection errors,
timeouts, 429 and 5xx (``engine.retries``) and a per-attempt timeout (``engine.request_timeout_seconds``); nothing
here retries by hand. An asyncio loop on one background thread runs up to ``engine.max_concurrency`` requests at
once; ``add`` / ``step`` hand requests and completions across, so the streaming loop drives it like any engine.

What a failed request becomes:
- the server answered with an error (after the client's retries): an error row saying what the server said; the
  other rows go on;
- no server answers any more (connection refused or reset after every retry): the job stops with one error naming
  ``engine.url``. Chunks already written are kept; the rerun after the server is back generates the rest, every row
  exactly once, as after an offline engine's crash.

Speculative figures: per row from the response where the server gives them (vLLM with
``--per-request-spec-decode-metrics``: the same figures as offline), and for the shard from the server's
``/metrics`` counters (server_metrics beside this module), which are server-wide: valid when the job is the server's
only client. Token counts and throughput are the job's own (its clock, the responses' tokens).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from typing import Any, NoReturn, Self

import httpx
import openai

from specbatch.backends.server import server_options
from specbatch.backends.server.server_answers import (
    SERVER_AT_FAULT,
    MalformedAnswer,
    checked_choices,
    row_figures,
    status_error,
)
from specbatch.backends.server.server_check import (
    CHECK_TIMEOUT,
    PROBE_PROMPT,
    ServerTarget,
    ServerUnreachable,
    api_key,
    check_server,
    server_root,
)
from specbatch.backends.server.server_metrics import parse_spec_counters
from specbatch.backends.vllm.vllm_family import VllmFamily
from specbatch.common.masking import mask_uri
from specbatch.config import JobConfig
from specbatch.data.prompts import load_tokenizer
from specbatch.engine.base import Completion, Request, Sample
from specbatch.engine.spec_metrics import SERVER_WIDE_NOTE, Counters, RowSpecFigures

log = logging.getLogger(__name__)
# httpx logs every request at INFO: thousands of lines per shard.
for _name in ("httpx", "httpx2"):  # the openai client uses httpx2
    logging.getLogger(_name).setLevel(logging.WARNING)


class ServerEngine(VllmFamily):
    """Requests to a running OpenAI-compatible server (see the module docstring)."""

    name = "server"
    # The checkpoints and packages are the server's, not this machine's: nothing local to check them by.
    preflight_skipped = "the method's checks against local checkpoints are the server's to do"
    figures_from_a_server = True
    fixed_speculation = (
        "the server's speculative set-up was fixed by whoever started it, and the job cannot switch it between "
        "phases. Choose on the offline engine (engine.backend=vllm spec=auto, e.g. with max_samples=500 of your "
        "rows), then serve the winner with the overrides its decision.json gives (python jobs/serve.py --print "
        "<overrides>), or measure the server as it is with spec=none or the spec it was started with"
    )

    @classmethod
    def batch(cls, job: JobConfig) -> int | None:
        # The job's side of the batch; the server's own is whatever it was started with.
        return server_options(job).max_concurrency

    def __init__(self, job: JobConfig, target: ServerTarget) -> None:
        # Built (and checked) once: every read of a knob below is of this.
        self._options = server_options(job)
        super().__init__(type(self).fingerprint_of(job), concurrency=self._options.max_concurrency)
        self.job, self.target = job, target
        # With speculation the spec counters are the whole server's (every client's requests); without, the
        # counters are only the job's own token counts.
        self.counters_scope = "server" if job.spec.k is not None else "requests"
        self.url = self._options.url
        self._root = server_root(self.url)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="specbatch-server-client", daemon=True)
        self._thread.start()
        self._client = self._call(self._make_client())
        self._semaphore = asyncio.Semaphore(self._options.max_concurrency)
        self._pending: dict[int, concurrent.futures.Future[Completion]] = {}
        self._finished: queue.Queue[int] = queue.Queue()
        self._ids = 0
        # The job's own token counts (the server's count every client's).
        self._prompt_tokens = self._generation_tokens = 0
        # /metrics with the same key: a server behind an authenticating proxy guards it too.
        self._metrics = httpx.Client(timeout=CHECK_TIMEOUT, headers={"Authorization": f"Bearer {api_key(job)}"})
        # Only for servers that return no token ids (vLLM does): loaded on first need.
        self._tokenizer: Any = None

    async def _make_client(self) -> openai.AsyncOpenAI:
        # Made on the loop's thread: its connection pool belongs to that loop.
        engine = self._options
        return openai.AsyncOpenAI(
            base_url=engine.url,
            api_key=api_key(self.job),
            max_retries=engine.retries,
            timeout=engine.request_timeout_seconds,
        )

    def _call(self, coroutine: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    @classmethod
    def check(cls, job: JobConfig) -> None:
        check_server(job)

    @classmethod
    def describe(cls, engine: dict[str, Any]) -> str:
        # The config is masked already: a password in the URL never gets here.
        return (
            f"Generated by the server at `{engine['url']}` ({engine['api']} API). Speculative figures: "
            f"{SERVER_WIDE_NOTE}."
        )

    @classmethod
    def start(cls, job: JobConfig) -> Self:
        began = time.perf_counter()
        engine = cls(job, check_server(job))
        engine.startup_seconds = time.perf_counter() - began
        log.info(
            "server at %s: model %s through the %s API, up to %d requests at once",
            mask_uri(engine.url),
            engine.target.model,
            engine.target.api,
            engine.concurrency,
        )
        if job.engine.warmup:
            engine.warm_up()
        return engine

    def warmup(self) -> None:
        """One short request, so the server's own first-call costs stay out of the timings."""
        began = time.perf_counter()
        # One sample, as the job asks each of its samples.
        sampling = self.job.sampling.for_sample(self.job.sampling.seed)
        warm = Request("warmup", 1, PROBE_PROMPT * 2, sampling, ({"role": "user", "content": "Hello"},))
        self._call(self._ask_once(warm, max_tokens=8))
        self.warmup_seconds = time.perf_counter() - began

    def counters(self) -> Counters | None:
        """The job's own token counts, with the server's spec-decode counters (None when /metrics has none)."""
        own = Counters(prompt_tokens=self._prompt_tokens, generation_tokens=self._generation_tokens)
        if self.job.spec.k is None:
            return own
        try:
            response = self._metrics.get(f"{self._root}/metrics")
            response.raise_for_status()
        except httpx.HTTPError as exc:
            log.warning("no spec-decode counters from %s/metrics (%s)", mask_uri(self._root), type(exc).__name__)
            return None
        spec = parse_spec_counters(response.text)
        if spec is None:
            return None
        return Counters(
            prompt_tokens=own.prompt_tokens,
            generation_tokens=own.generation_tokens,
            drafts=spec.drafts,
            draft_tokens=spec.draft_tokens,
            accepted_tokens=spec.accepted_tokens,
            accepted_per_position=spec.accepted_per_position,
        )

    def add(self, request: Request) -> None:
        key, self._ids = self._ids, self._ids + 1
        future = asyncio.run_coroutine_threadsafe(self._ask(request), self._loop)
        self._pending[key] = future
        future.add_done_callback(lambda _: self._finished.put(key))

    def step(self) -> list[Completion]:
        if not self._pending:
            return []
        keys = [self._wait_for_one()]
        while True:
            try:
                keys.append(self._finished.get_nowait())
            except queue.Empty:
                break
        done, failed = [], []
        for key in keys:
            future = self._pending.get(key)
            if future is None or future.cancelled():
                self._pending.pop(key, None)
                continue
            if future.exception() is not None:
                failed.append(key)
                continue
            del self._pending[key]
            completion = future.result()
            self._prompt_tokens += len(completion.request.prompt_token_ids) * max(1, len(completion.samples))
            self._generation_tokens += sum(len(s.token_ids) for s in completion.samples)
            done.append(completion)
        if failed and done:
            # What finished beside a failure is handed back first, so its chunk can still be written; the failure
            # is raised at the next step.
            for key in failed:
                self._finished.put(key)
        elif failed:
            # ServerUnreachable (and anything unexpected) ends the shard here; error rows come back as completions.
            self._pending.pop(failed[0]).result()
        return done

    def _wait_for_one(self) -> int:
        # A timeout, so Ctrl-C and SIGTERM are handled while every request is still on the wire.
        while True:
            try:
                return self._finished.get(timeout=0.5)
            except queue.Empty:
                continue

    @property
    def unfinished(self) -> int:
        return len(self._pending)

    def cancel(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self.cancel()
        try:
            self._call(self._client.close(), timeout=10)
        finally:
            self._metrics.close()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    async def _ask(self, request: Request) -> Completion:
        """The request's completion, or an error row when the answer says the row is at fault (HTTP 4xx) or is
        malformed. A server at fault (no connection, no answer in time, 5xx, 408, 429, after the client's retries)
        stops the shard instead: an error row would close it, and its rows could never be generated again."""
        async with self._semaphore:
            began = time.perf_counter()
            try:
                samples = await self._ask_once(request)
            except openai.APITimeoutError:
                self._stop_shard(
                    request,
                    f"no answer within engine.request_timeout_seconds={self._options.request_timeout_seconds}",
                )
            except openai.APIConnectionError as exc:
                self._stop_shard(request, str(exc.__cause__ or exc))
            except openai.APIStatusError as exc:
                if exc.status_code >= 500 or exc.status_code in SERVER_AT_FAULT:
                    self._stop_shard(request, status_error(exc))
                return Completion(request, [], time.perf_counter() - began, error=status_error(exc))
            except (MalformedAnswer, openai.APIResponseValidationError, ValueError, TypeError, AttributeError) as exc:
                # HTML from a proxy, JSON without choices, token ids that are not integers...: this row's answer is
                # unusable, the next one may not be.
                why = f"malformed answer from the server: {mask_uri(str(exc))}"
                return Completion(request, [], time.perf_counter() - began, error=why)
            return Completion(request, samples, time.perf_counter() - began)

    def _stop_shard(self, request: Request, why: str) -> NoReturn:
        raise ServerUnreachable(
            f"engine.url={mask_uri(self.url)} stopped answering properly ({why}, for row {request.row_id}; after "
            f"engine.retries={self._options.retries} retries). Chunks already written are kept: when the server "
            "answers again, rerun the same command to generate the rest"
        ) from None

    async def _ask_once(self, request: Request, max_tokens: int | None = None) -> list[Sample]:
        sampling = request.sampling
        common: dict[str, Any] = {
            "model": self.target.model,
            "max_tokens": max_tokens or sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "n": sampling.n,
            "seed": sampling.seed,
        }
        extra: dict[str, Any] = {"return_token_ids": True}
        if sampling.top_k:
            extra["top_k"] = sampling.top_k
        if sampling.ignore_eos:
            # vLLM's, SGLang's and llama.cpp's servers read it beside the OpenAI fields.
            extra["ignore_eos"] = True
        if self.target.api == "completions":
            response = await self._client.completions.create(
                prompt=request.prompt_token_ids, extra_body=extra, **common
            )
            choices = checked_choices(response, common["n"])
            texts = [(c.text, c.finish_reason, getattr(c, "token_ids", None)) for c in choices]
        else:
            if request.messages is None:
                raise ValueError(f"row {request.row_id}: the chat API needs the row's messages")
            response = await self._client.chat.completions.create(
                messages=list(request.messages), extra_body=extra, **common
            )
            texts = [
                (c.message.content or "", c.finish_reason, getattr(c, "token_ids", None))
                for c in checked_choices(response, common["n"])
            ]
        for index, (text, _, ids) in enumerate(texts):
            if not isinstance(text, str):
                raise MalformedAnswer(f"choice {index} has no text ({text!r})")
            if ids is not None and not (isinstance(ids, list) and all(type(i) is int for i in ids)):
                raise MalformedAnswer(f"choice {index}'s token_ids are not a list of integers")
        try:
            figures = self.row_figures(response) if len(texts) == 1 else None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MalformedAnswer(f"its metrics.speculative_decoding is not what vLLM sends ({exc!r})") from None
        return [Sample(text, self._token_ids(text, ids), reason, figures) for text, reason, ids in texts]

    def row_figures(self, response: Any) -> RowSpecFigures | None:
        """The response's per-request speculative figures (a backend for another server reads its own fields)."""
        return row_figures(response)

    def _token_ids(self, text: str, ids: list[int] | None) -> list[int]:
        """The server's token ids; a server that returns none gets the text tokenized here (same tokenizer)."""
        if ids is not None:
            return list(ids)
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.job.model)
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])
