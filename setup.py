"""Build the C core (csrc/) once as a static library and the Cython
extensions that wrap it, one extension per concept."""
import glob
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

CSRC = sorted(glob.glob("csrc/*.c"))

# -O2 and nothing machine-specific by default: -march=native breaks valgrind
# and wheels moved to other CPUs.  RPBCAST_NATIVE=1 opts in.
CFLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-fno-strict-aliasing"]
if os.environ.get("RPBCAST_NATIVE") == "1":
    CFLAGS.append("-march=native")
if os.environ.get("RPBCAST_DEBUG") == "1":
    CFLAGS += ["-O0", "-g", "-fsanitize=address,undefined"]

# csrc/gcmlib.c: the MAC's AES-GCM from intel-ipsec-mb (libipsec-mb-dev) when
# its header is there; without it the build uses OpenSSL's EVP only.
HAVE_IPSECMB = os.path.exists("/usr/include/intel-ipsec-mb.h") and os.environ.get("RPBCAST_NO_IPSECMB") != "1"
if HAVE_IPSECMB:
    CFLAGS.append("-DRP_HAVE_IPSECMB")

MODULES = [*(f"core.{m}" for m in ("seqtrack", "digest", "signature", "stability", "srb", "msgstore", "wire",
                                  "logstore", "node")),
           "drivers.udp",
           # the simulator's C core, lower pieces first (rpbcast/sim/_core.pyx)
           *(f"sim.{m}" for m in ("events", "packets", "channel", "links", "routes", "hosts", "inputq",
                                  "forwarding", "driver", "deliveries", "spt", "_core"))]


# RPBCAST_ONLY=core.node,drivers.udp rebuilds just those (development).
if os.environ.get("RPBCAST_ONLY"):
    MODULES = [m for m in os.environ["RPBCAST_ONLY"].split(",") if m]


def ext(name):
    return Extension(
        f"rpbcast.{name}",
        [f"rpbcast/{name.replace('.', '/')}.pyx"],
        include_dirs=["csrc", numpy.get_include()],
        extra_compile_args=[f for f in CFLAGS if f != "-std=gnu11"] + ["-Wno-unused-function"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        # csrc/auth.c: AES-GMAC from intel-ipsec-mb and OpenSSL's libcrypto (after the core on the link line)
        extra_link_args=(["-lIPSec_MB"] if HAVE_IPSECMB else []) + ["-lcrypto"],
        # Relink when the core changes (the static library is not tracked).
        depends=CSRC + sorted(glob.glob("csrc/*.h")),
    )


setup(
    # obj_deps "": every object depends on every header, so an edit to an
    # inline function in a header (trace.h, rp_common.h) rebuilds the core.
    libraries=[("rpbcore", {"sources": CSRC, "include_dirs": ["csrc"], "cflags": CFLAGS,
                            "obj_deps": {"": sorted(glob.glob("csrc/*.h"))}})],
    ext_modules=cythonize(
        [ext(m) for m in MODULES],
        compiler_directives={"language_level": "3", "embedsignature": True},
        include_path=["."],
    ),
)
