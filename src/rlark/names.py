"""Name rules that need nothing else (no pydantic): what the ``rlark`` command checks before it
calls the API, without importing the Job model (:mod:`rlark.spec` re-exports them)."""

from __future__ import annotations

import re

#: Kubernetes DNS-1123 label (RFC 1123): lower-case alphanumerics and '-', 63 characters at most.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: Kubernetes DNS-1123 subdomain (a PersistentVolumeClaim's, a ServiceAccount's name): labels
#: joined by '.', 253 characters at most (checked apart)
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
