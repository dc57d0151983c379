"""Preflight: what RLark says of a Job before anything is stored or started, the same on every
runtime. :mod:`.job` holds the Job's own checks (:func:`~rlark.preflight.job.check_job`,
:func:`~rlark.preflight.job.validate_document`, what the CLI's ``rlark validate``, the REST API
and the console all call); :mod:`.quantities` parses the spec's memory and CPU quantities and
image references. Each runtime's own Findings come from the runtime
(:meth:`rlark.runtimes.base.RuntimeProfile.preflight`).
"""
