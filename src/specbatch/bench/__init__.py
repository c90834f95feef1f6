"""Benchmarks (not tests) behind jobs/bench*.py: the job against a bare vLLM script, speculation's speedups, keeping
the engine full, memory as the data set grows, and every method on the same prompts. Each returns its report as
text; the job scripts parse arguments and print it.

What jobs/bench.py measures:

(a) Overhead: ``jobs/generate.py`` (default config, 16 prompts, full batch) and ``jobs/bench_bare.py`` (a bare
    ``vllm.LLM`` script given the same ``LLM`` arguments and prompt token ids), each a fresh process; wall time minus
    engine start-up, job ÷ bare (goal ≤ 1.03); the bare script's spec=none gives vLLM's own speedup beside the job's.
(b) Speedup: spec=none, ngram and suffix at several k, at batch size 1 (engine.max_num_seqs=1) and at full batch,
    greedy, on the default code-editing task, through ``run_job``; speedup and equality from jobs/compare's analysis
    of the stored runs. Goals: ≥ 3.0x at batch 1 and ≥ 2.0x at full batch with the best k.
(c) Keeping the engine full (issue 12; ``--streaming`` runs only this): the job with chunk_size=8, with one chunk,
    and the bare script, on humaneval_edit and a two-turn file. Goals ≥ 0.97. See specbatch.bench.full_engine.
(d) k schedules (issue 15; ``--schedule`` runs (a) and this): the schedule beside the best fixed k per batch size
    (within 3 %) and every single k (ahead). ~85 engines, about an hour; the same --schedule-dir resumes.
(e) Start-up (``--startup``): launch to exit of a four-prompt job per checkout given. See specbatch.bench.startup.
(f) Predicted beside measured (issue 27; ``--predict`` runs only this): ngram k 1,2,3,5,8 and suffix at batch 1 and
    full batch against compare's replay prediction (AL within 1 % n-gram, 5 % suffix; speedup within 10 %), and
    replay's speed on 1,000 rows. 28 engines, about 30 minutes. See specbatch.bench.prediction_bench.
(g) spec=auto (issues 28, 52, 67; ``--auto`` runs only this): the whole auto run against spec=none and the two
    fastest fixed set-ups of a short sweep, on 1,000-row jobs (help-desk chat at batch 16 and full batch, code
    editing and retrieval answers at 16), with a fixed run of what auto chose; tok/s of the whole job (start-ups
    included). Goals: its choice's fixed run >= 0.97x the best fixed, its wall time <= 3 % over that run's, >= 0.97x
    none where none is best, >= 0.95x the best fixed. Hours per cell; ``--stamp`` resumes. See
    specbatch.bench.auto_bench.
(h) Sampling (issue 29; ``--sampling`` runs only this): spec=none, ngram and suffix on the default data set with n=4
    samples per prompt at temperature 0.7; then the lossless check (issue 53): spec=none, ngram, suffix (embedded
    model) and draft_model, EAGLE (tiny pair), each at most 20,000 sampled tokens in float32, scored by the referee,
    and two planted faults that must come out `differs`. See specbatch.bench.sampling_bench.
(i) spec=simulate (issue 54; ``--simulate`` runs only this): real n-gram k=3 and spec=simulate at its own profile,
    alternating, equal lengths. Goals: AL within 3 %, tok/s within 10 %. See specbatch.bench.simulate_bench.
(j) Block against standard verification (issue 54; ``--verification`` runs only this, on a GPU machine): EAGLE3 k=3
    on Llama 3.1 8B, AL and tok/s on humaneval_edit and the two-turn file. See specbatch.bench.verification_bench.
(k) Ray (issue 55; ``--ray`` runs only this): the same 128 rows as a local launch and with launcher=ray on a local Ray
    (1 replica), alternating. Goal: Ray / local throughput at least 0.90, start-up listed apart. See
    specbatch.bench.ray_bench.
(l) A trained EAGLE-3 head (issue 66; ``--drafter`` runs only this): the embedded head and one trained on half its
    data, AL per k and position on held-out chat and code, tok/s against spec=none and n-gram k3 at batch 1, 4, 16,
    token equality and the lossless verdict at T 0.7. Goal: the larger head's AL at k 3 on chat at least 1.6 and
    above the smaller's. See specbatch.bench.drafter_bench.
"""

from specbatch.common.machine import this_machine


def machine_header() -> str:
    """The line every report starts its figures with: ratios from two machines are not comparable."""
    return f"machine: {this_machine().line()}"
