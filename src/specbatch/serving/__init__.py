"""Server processes and their command lines: what a server the job or ``jobs/serve.py`` starts runs as (vLLM's
``vllm serve``, llama.cpp's ``llama-server``), how it is started, waited for, stopped and killed (``child_server``),
the reaper that ends what a killed job left (``reaper``), the commands that serve a measured set-up with vLLM,
Dynamo, SGLang or llama.cpp (``command_lines``, ``llama_server``), and the job in vLLM's terms, which the offline
backend and the served command share (``vllm_args``).

Below ``engine``: the backends that generate (``specbatch.engine``) start and clean up through it, never the reverse.
"""
