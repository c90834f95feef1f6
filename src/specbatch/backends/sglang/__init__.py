"""SGLang as a serve-only target: the command that serves a job's set-up with SGLang (and Dynamo's SGLang worker),
and SGLang's table of speculative methods. No engine: jobs run against an SGLang server with engine.backend=server.
"""
