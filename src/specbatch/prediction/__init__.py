"""Predicting drafting's acceptance on a finished run, without a model: the run's prompts and completions are
replayed through the drafting code the engine itself runs (vLLM's n-gram matcher, arctic-inference's suffix cache).

Under greedy decoding what n-gram lookup proposes at a step depends only on the prompt and the completion so far,
and suffix decoding's also on the earlier responses in its cache; the target accepts a draft's longest prefix that
equals the tokens it generates next, which are the run's own. So one run (``spec=none`` or any method) predicts the
acceptance of every n-gram and suffix set-up on its rows.

Data flow: ``setups`` says what to predict, ``turns`` reads the run's token ids, ``replay`` steps through each
completion as the engine would, ``figures`` adds the steps up per set-up (overall and per category) into acceptance
profiles, and ``predict_run`` does it all for a run folder, writes the result beside it and logs it to MLflow.
"""
