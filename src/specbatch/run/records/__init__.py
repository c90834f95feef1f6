"""The records of a run folder, one owner module each: the record's version, read, write and upgrade from what
older versions wrote. Code elsewhere is written for today's shape only and reads a record through its owner.

==============================================  ========================  ======================================
record                                          owner (run.records.…)     version
==============================================  ========================  ======================================
``run.json`` (+ ``config.yaml``)                ``run_json``              ``format`` 2 (absent: 1)
``data/<shard>/part-<n>.parquet``               ``output_parts``          schema metadata 5
``stats/<shard>/part-<n>.json``                 ``part_stats``            ``format`` 1 (absent: 1)
``stats/<shard>/launch-<id>.json``              ``launch_record``         ``format`` 1 (absent: 1)
``stats/<shard>/source.json``                   ``source_record``         ``format`` 1 (absent: 1)
``stats/<shard>.json``, ``merged/summary.json``  ``summary_file``          1 (no key written; above 1 refused)
``…/speculation_profile.json``                  ``profile_file``          2 = ``schema_version`` 1.0 (absent: 1)
``merged/manifest.json``                        ``manifest_file``         ``format`` 1 (absent: 1)
``decision.json``, ``…/auto-{plan,switch}.json``  ``decision_file``    ``format`` 1 (absent: 1)
``prediction/predicted.{json,parquet}``         ``prediction_file``       ``format`` 2 (absent: 1)
``stats/<shard>/steps/<n>.parquet``             ``steps_file``            metadata ``format`` 1
``mlflow_active/``, ``mlflow_pending/`` notes   ``tracking_notes``        ``format`` 1 (absent: 1)
==============================================  ========================  ======================================

The done marker (``done/<shard>``: a time stamp, its presence is what counts) and the lock (``locks/<shard>.lock``)
hold no record; :class:`specbatch.run.folder.RunFolder` names every path. ``record_files`` holds what the owners
share: RecordError, the version stamp and the refusal of a newer one.
"""
