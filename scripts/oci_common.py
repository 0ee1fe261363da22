"""What every part of the Docker-less image builder (scripts/oci_image.py) shares: its one error
type, its log line and the digest format. Standard library only."""

import hashlib
import sys

# The PATH a RUN step and the image config get unless the Dockerfile sets its own (Docker's).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class BuildError(Exception):
    """A reason the image cannot be built, printed as the script's one-line error."""


def log(message):
    print(f"[oci_image.py] {message}", file=sys.stderr, flush=True)


def sha256(data):
    return f"sha256:{hashlib.sha256(data).hexdigest()}"
