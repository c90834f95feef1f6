"""Child processes, whatever backend starts them: how a server the job or ``jobs/serve.py`` starts is started,
waited for, stopped and killed (``child_server``), the reaper that ends what a killed job left (``reaper``), the
shared memory its processes leave (``shm``), and command lines as text (``command_format``).

Neutral: no backend's flags or knobs. Above ``engine`` and below ``backends``, which start and clean up through it;
each backend's own command lines (``vllm serve``, ``llama-server``, SGLang) live in its folder.
"""
