"""``flexrt.configs``: configuration files installed with flexrt (package data, no code).

``machines/*.yaml`` are the machine presets that ``flexrt.machine.load_machine`` finds by name; read
them with ``importlib.resources.files("flexrt.configs") / "machines"``.
"""
