"""Drafting replayed over finished completions, step by step as vLLM's engine runs it under greedy decoding.

A completion of N tokens: the prefill samples token 0, undrafted. Then, while tokens are left, each step drafts from
the context so far (prompt + completion[:pos]); the target accepts the draft's longest prefix equal to the
completion's next tokens and adds one token of its own, so the step advances accepted + 1. A step without a draft
advances 1 and is not a drafting step (vLLM counts only steps that drafted). The drafting code is the engine's own:
vLLM's n-gram matcher (the numba function its proposer calls) and arctic-inference's suffix cache, with the
arguments vLLM's proposers give them.

The one gap to the engine's counters: a draft that runs past a completion's last token. The engine verifies those
positions against tokens it generated and cut (max_tokens, a stop token), which no run keeps; the replay counts them
as ``unverified`` (never accepted), at most one step per completion, and estimates how many the engine accepted
(:meth:`Drafting.expected_unverified_accepted`): past a max_tokens cut, where the text would have gone on as before,
each such position at the acceptance the replay saw there where it could verify; past a stop token none (what the
engine verifies there is no longer the answer: on 64 HumanEval rows at k=8 it accepted 22 of 86 such tokens, where
the rate seen elsewhere would have said 66; past the cut it accepted 44 of 54 and the estimate said 44.3).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from specbatch.common.numba_cache import cache_numba_functions
from specbatch.prediction.setups import NgramSetup, Setup, SuffixSetup
from specbatch.prediction.turns import ReplayTurn


@dataclass
class Drafting:
    """Drafting figures of one completion (or a sum of them): steps that drafted, draft tokens, accepted tokens,
    accepted[i] = drafts whose position i was accepted, and the draft tokens past the completion's end."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: list[int] = field(default_factory=list)
    unverified: int = 0
    # reached[i] = drafts whose position i was verified with every position before it accepted (so per_position[i]
    # / reached[i] is the acceptance at i given the ones before); tails[(m, u)] = steps that matched all m positions
    # left before the completion's end and had u more past it.
    reached: list[int] = field(default_factory=list)
    tails: dict[tuple[int, int], int] = field(default_factory=dict)

    def step(self, draft_length: int, accepted: int, unverified: int) -> None:
        self.drafts += 1
        self.draft_tokens += draft_length
        self.accepted += accepted
        self.unverified += unverified
        _bump(self.per_position, range(accepted))
        _bump(self.reached, range(min(accepted + 1, draft_length - unverified)))
        if unverified:
            self.tails[(accepted, unverified)] = self.tails.get((accepted, unverified), 0) + 1

    def add(self, other: Drafting) -> None:
        self.drafts += other.drafts
        self.draft_tokens += other.draft_tokens
        self.accepted += other.accepted
        self.unverified += other.unverified
        _add(self.per_position, other.per_position)
        _add(self.reached, other.reached)
        for tail, count in other.tails.items():
            self.tails[tail] = self.tails.get(tail, 0) + count

    def expected_unverified_accepted(self) -> float:
        """How many unverified draft tokens the engine is expected to have accepted: position i past the end at the
        acceptance these figures saw at position i given the ones before (0 where they never verified one)."""
        # per_position is never longer than reached (an accepted position was reached); past it the rate is 0.
        pairs = zip(self.per_position, self.reached, strict=False)
        rate = [count / reached if reached else 0.0 for count, reached in pairs]
        expected = 0.0
        for (matched, past), count in self.tails.items():
            chain = 1.0
            for position in range(matched, matched + past):
                chain *= rate[position] if position < len(rate) else 0.0
                expected += count * chain
        return expected


def _bump(counts: list[int], positions: range) -> None:
    if len(counts) < positions.stop:
        counts.extend([0] * (positions.stop - len(counts)))
    for position in positions:
        counts[position] += 1


def _add(counts: list[int], other: list[int]) -> None:
    if len(counts) < len(other):
        counts.extend([0] * (len(other) - len(counts)))
    for position, count in enumerate(other):
        counts[position] += count


def _verify(draft: np.ndarray, completion: np.ndarray, pos: int) -> tuple[int, int]:
    """(accepted, unverified) of ``draft`` proposed with completion[:pos] known: its longest prefix equal to the
    completion's next tokens, and its tokens past the completion's end when the whole rest of it matched."""
    ahead = completion[pos : pos + len(draft)]
    matches = draft[: len(ahead)] == ahead
    if matches.all():
        return len(ahead), len(draft) - len(ahead)
    return int(np.argmin(matches)), 0


def _walk(completion: np.ndarray, propose: Callable[[int], np.ndarray]) -> Drafting:
    """The engine's steps over one completion on its own: ``propose(pos)`` drafts with completion[:pos] known."""
    figures = Drafting()
    pos = 1  # the prefill's token
    while pos < len(completion):
        draft = propose(pos)
        accepted = 0
        if len(draft):
            accepted, unverified = _verify(draft, completion, pos)
            figures.step(len(draft), accepted, unverified)
        pos += accepted + 1
    return figures


def replay_ngram(turn: ReplayTurn, setup: NgramSetup, max_model_len: int) -> Drafting:
    """n-gram drafting over one completion, through vLLM's own matcher."""
    from vllm.v1.spec_decode import ngram_proposer

    cache_numba_functions(ngram_proposer)  # compiled once per machine, not per process
    find = ngram_proposer._find_longest_matched_ngram_and_propose_tokens
    context = turn.context()
    start = len(turn.prompt)

    def propose(pos: int) -> np.ndarray:
        return find(context[: start + pos], setup.min_n, setup.max_n, max_model_len, setup.k)

    return _walk(turn.completion, propose)


@dataclass
class _Running:
    """A request in the replayed suffix engine: its completion so far (``pos`` tokens) and its pending draft."""

    turn: ReplayTurn
    context: np.ndarray
    pos: int = 0
    draft: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int32))
    figures: Drafting = field(default_factory=Drafting)


def replay_suffix(
    turns: list[ReplayTurn], setup: SuffixSetup, max_model_len: int, concurrency: int | None
) -> list[tuple[ReplayTurn, Drafting]]:
    """Suffix decoding over one shard's completions through one arctic-inference cache, fed and asked as vLLM's
    suffix proposer does, in engine steps: ``concurrency`` requests at once (None: all), admitted in the order the
    job asked for them (a row's next turn first, when its turn before ends), and at each step every running request,
    in batch order, verifies its draft, adds the tokens the step gave it to the cache and drafts again. So a request
    sees the other requests' responses as far as the engine had them (exact for one request at a time; in a batch,
    vLLM's admission and batch order within a step can differ)."""
    from arctic_inference.suffix_decoding import SuffixDecodingCache

    cache = SuffixDecodingCache(max_tree_depth=setup.max_tree_depth, max_cached_requests=setup.max_cached_requests)
    keys = {turn.key for turn in turns}
    later = {
        (t.row_id, t.turn - 1, t.sample_index): t for t in turns if (t.row_id, t.turn - 1, t.sample_index) in keys
    }
    order = sorted(
        (t for t in turns if t not in later.values()), key=lambda t: t.answered if concurrency == 1 else t.position
    )
    waiting = deque(order)
    running: list[_Running] = []
    done: list[tuple[ReplayTurn, Drafting]] = []

    def propose(request: _Running) -> np.ndarray:
        known = len(request.turn.prompt) + request.pos
        pattern = request.context[max(0, known - setup.max_tree_depth) : known]
        draft = cache.speculate(
            request.turn.key,
            pattern,
            max_spec_tokens=min(setup.k, max_model_len - known - 1),
            max_spec_factor=setup.max_spec_factor,
            min_token_prob=setup.min_token_prob,
        )
        return np.asarray(draft.token_ids, dtype=np.int32)

    while waiting or running:
        while waiting and len(running) < (concurrency or len(turns)):
            turn = waiting.popleft()
            cache.start_request(turn.key, turn.prompt)
            running.append(_Running(turn, turn.context()))
        finished = []
        for request in running:
            completion, pos = request.turn.completion, request.pos
            accepted = 0
            if pos and len(request.draft):
                accepted, unverified = _verify(request.draft, completion, pos)
                request.figures.step(len(request.draft), accepted, unverified)
            step = 1 if pos == 0 else accepted + 1  # the prefill samples the first token
            cache.add_active_response(request.turn.key, completion[pos : pos + step].tolist())
            request.pos += step
            if request.pos >= len(completion):
                finished.append(request)
            else:
                request.draft = propose(request)
        for request in finished:
            running.remove(request)
            cache.stop_request(request.turn.key)
            done.append((request.turn, request.figures))
            following = later.get(request.turn.key)
            if following is not None:
                waiting.appendleft(following)
    return done


def replay(
    turns: Iterable[ReplayTurn], setup: Setup, max_model_len: int, concurrency: dict[int, int | None] | None = None
) -> list[tuple[ReplayTurn, Drafting]]:
    """Each turn's drafting under ``setup``; suffix's shard by shard (one engine and cache each), ``concurrency``
    giving each shard's requests at once (default: one at a time)."""
    turns = list(turns)
    if isinstance(setup, NgramSetup):
        return _estimable([(turn, replay_ngram(turn, setup, max_model_len)) for turn in turns])
    shards: dict[int, list[ReplayTurn]] = {}
    for turn in turns:
        shards.setdefault(turn.position[0], []).append(turn)
    return _estimable(
        [
            pair
            for shard, shard_turns in sorted(shards.items())
            for pair in replay_suffix(shard_turns, setup, max_model_len, (concurrency or {}).get(shard, 1))
        ]
    )


def _estimable(replayed: list[tuple[ReplayTurn, Drafting]]) -> list[tuple[ReplayTurn, Drafting]]:
    """Only drafts past a max_tokens cut are estimated (module docstring): the tails past a stop token are dropped
    (their tokens stay counted as unverified)."""
    for turn, figures in replayed:
        if turn.finish_reason != "length":
            figures.tails.clear()
    return replayed
