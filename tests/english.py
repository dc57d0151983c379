"""What counts as English left in a Chinese text (issue 19, item 2), for the browser test of
every console page (tests/test_console_zh_browser.py) and the tests of the server's texts
(tests/test_console_texts.py, tests/test_cli_texts.py).

Latin letters may stay in a Chinese text only as:

* code: text in code, pre and monospace elements on a page, `backticked` in a plain text
  (commands, fields, log lines, the words of Ray or Kubernetes a message quotes);
* identifiers: the names the text is about (Jobs, roles, Workers, projects, users, hosts,
  tokens: given by the caller), values quoted as the user wrote them (``'abc'``), any token with a digit or one of ``- _ . / : = @ [ ]`` (paths,
  images, addresses, versions, Worker names, numbers) and camelCase field names
  (``workingDir``);
* units (:data:`UNITS`);
* proper names, abbreviations read as written, and the few terms the Chinese catalog keeps as
  they are: RLark's vocabulary Job, Worker and head, Kubernetes' Pod (:data:`PROPER`).
"""

from __future__ import annotations

import re

PROPER = {"RLark", "RLinf", "Ray", "Kubernetes", "Python", "PyTorch", "Hydra", "CUDA", "NCCL",
          "NVIDIA", "Markdown", "English", "Swagger", "Job", "Worker", "Pod", "head",
          "ServiceAccount", "StorageClass", "Secret", "ComponentPlacement", "ClusterConfig",
          "API", "YAML", "JSON", "CSV", "CPU", "CPUs", "GPU", "GPUs", "IP", "UTC", "URL", "PVC",
          "CSI", "GCS", "DNS", "SHA", "ID", "OK", "RBAC", "PID", "NUL", "Unicode", "Service",
          # programs named as they are: Bash, Git, the Ray process that runs a node
          "Bash", "git", "raylet",
          # the term the Chinese catalog keeps for the notifications' endpoints (nav.webhooks),
          # the chat service a webhook's format is named for, and the HTTP method it is sent with
          "Webhook", "Slack", "POST",
          # the Kubernetes queueing system the Queue page names (runtimes/kubernetes/kueue.py)
          "Kueue"}
UNITS = {"B", "KiB", "MiB", "GiB", "TiB", "Ki", "Mi", "Gi", "Ti", "s", "ms", "min", "h", "m", "d"}
TOKEN = re.compile(r"[A-Za-z0-9_./:=@'’\[\]-]*[A-Za-z][A-Za-z0-9_./:=@'’\[\]-]*")
_IDENTIFIER = re.compile(r"[0-9_/:=@\[\]-]|\w\.\w|[a-z][A-Z]")
_CODE = re.compile(r"`[^`\n]*`")
#: a value a message quotes as the user wrote it ('abc', "abc", no space inside)
_QUOTED = re.compile(r"'[^'\s]*'|\"[^\"\s]*\"")


def english_words(text: str, names: set[str] = frozenset()) -> list[str]:
    """The Latin-letter words of ``text`` (a page's visible text outside code, or a plain text
    whose code is `backticked`) that are neither code, an identifier, a unit nor a proper name."""
    left = []
    for token in TOKEN.findall(_QUOTED.sub(" ", _CODE.sub(" ", text))):
        word = token.strip("'’.:-")
        if (not word or word in names or word in PROPER or word in UNITS
                or _IDENTIFIER.search(word)):
            continue
        left.append(word)
    return left
