"""The local runtime: every Worker is a process group on this machine.

:mod:`.runtime` implements the Runtime protocol (launch, observe, stop, adopt); the rest are its
parts: :mod:`.isolation` (how a Worker's processes are kept together: PID namespace, cgroup),
:mod:`.identity` (the uid a Run's Workers run as), :mod:`.sandbox` (the mount namespace that hides
the server's files), :mod:`.ports` (loopback addresses and port blocks) and
:mod:`.reservations` (the host-wide locks on them).
"""
