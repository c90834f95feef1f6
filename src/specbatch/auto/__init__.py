"""spec=auto: the job chooses its speculative set-up on its own rows (docs/auto.md).

Data flow: ``candidates`` turns spec.auto into fixed set-ups (the presets ``spec=<method>`` composes) and the job
each phase runs; ``generation`` cuts a shard into the pilot (spec=none), the measurements and the rest, and runs
each phase on an engine of its set-up; ``decision`` is the reasoning between them, from figures alone: the replay's
prediction on the pilot, whether measuring fits the budget, and compare's noise rule on the measured slices.
"""
