"""The ``rpbcast`` command line."""
import argparse
import sys


def _selfcheck(args):
    from rpbcast import selfcheck
    return selfcheck.run(verbose=not args.quiet)


def build_parser():
    p = argparse.ArgumentParser(prog="rpbcast", description="Reliable multicast for pub/sub and trading feeds.")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("selfcheck", help="exercise the C core and report what this machine supports")
    s.add_argument("-q", "--quiet", action="store_true")
    s.set_defaults(func=_selfcheck)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    rc = args.func(args)
    return 0 if rc is None else rc


if __name__ == "__main__":
    sys.exit(main())
