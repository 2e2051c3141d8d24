"""Release rehearsals on this machine: against a local package index
(``rehearsal``, with the index in ``indexserver`` and the install scenarios in
``indexinstall``), and the release workflow's data flow replayed job by job
(``dataflow``, one cells job's wheel in ``flowjob``).

May import: ``base``, ``matrix``, ``envs``, ``build``, ``release``.
"""
