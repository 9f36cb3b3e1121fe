"""The ``qbench`` command line: ``main`` (parser, dispatch, exit codes) and one module per
command (``run``, ``tune``, ``build``, ``diagnose``, ``sweep``, ``layers``, ``models``,
``baseline``), over the shared option groups (``options``) and their checks (``runopts``)."""
