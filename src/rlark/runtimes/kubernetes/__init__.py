"""The Kubernetes runtime: one Pod per Worker, a headless Service for the Ray head, a ConfigMap
carrying the bootstrap, all owned by the Run's ConfigMap.

Pure parts (no I/O, tested without a cluster): :mod:`.render` (objects), :mod:`.status` (Pod +
Events -> Worker state and failure), :mod:`.capacity` (node inventory -> Findings). The thin layer
that talks to the API server is :mod:`.client`; :mod:`.runtime` implements the Runtime protocol on
top of it. Importing this package does not import the ``kubernetes`` client.
"""
