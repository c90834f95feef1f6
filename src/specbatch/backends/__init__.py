"""The engine backends, one folder each: ``specbatch.backends.<name>`` is ``engine.backend=<name>``.

A backend's package is found from the config by that convention (``specbatch.config.engine.backend_package``), so
adding one is a folder and nothing else. Its ``__init__`` is light (it must not import vLLM, torch or a client
library) and declares:

- ``Options``: a dataclass of the backend's own knobs, typed as users type them (``engine.<knob>=...``; a knob in
  ``Options.SECTIONS`` is typed under another section, e.g. ``model.gguf``). Field metadata declares identities
  (``specbatch.config.declarations``); a knob another backend declares too is shared by name.
- ``ENGINE``: ``"module:Class"`` of its :class:`specbatch.engine.Engine` subclass, imported only when a job runs
  on it.

The modules beside it hold the engine class, its table from speculative methods to its own flags, the command that
serves a set-up on it, its install/check step and the reader of its acceptance figures. A folder without ``ENGINE``
(``sglang``) only serves: it has a serve command and a method table, no engine.
"""
