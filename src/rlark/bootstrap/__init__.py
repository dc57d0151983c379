"""The program every Worker runs, on every runtime (ARCHITECTURE.md, "Worker bootstrap
contract"): standard library and ``ray`` only, nothing else of RLark, so it runs in any RLinf
image; it travels as one file, the archive :mod:`rlark.bootstrap.archive` builds
(``python rlark-bootstrap.pyz {keeper|worker|exec}``, see ``__main__.py``).

The keeper's side (the Worker's first process, out of the workload's reach): ``keeper.py``
(its life), ``relay.py`` (the Worker's log), ``sandbox.py`` (prctl, the mount namespace, the
jail). The workload's side: ``worker.py`` (one Worker's life), ``ray_node.py`` (``ray start``),
``barrier.py`` (the head's join barrier), ``node_table.py`` (reading Ray's node table),
``port_watch.py``, ``scripts.py`` (prepare and run scripts), ``facts*.py`` (the run record's
facts), ``report.py`` (reports to the keeper). Both: ``config.py`` (settings, errors, exit
codes) and ``lifecycle.py`` (the line format and the typed reports).
"""
