"""rpbcast: reliable multicast for publish/subscribe systems and trading feeds."""

import os as _os

# NumPy's OpenBLAS pool busy-waits after array operations; on a small
# machine that steals the core the I/O loop needs.  We never use BLAS, so
# default it to one thread (an explicit setting wins).
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"

from rpbcast.config import Config, ConfigError, MemberSpec  # noqa: E402,F401


def __getattr__(name):
    # The socket layer loads on first use, so the sans-IO parts import
    # without it.
    if name in ("Node", "Logger", "Message", "Batch"):
        from rpbcast import api
        return getattr(api, name)
    raise AttributeError(name)
