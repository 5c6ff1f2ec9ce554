"""Commands for running single nodes: node, logger, pub, sub, stat, selfcheck."""


def _selfcheck(args):
    from rpbcast import selfcheck
    return selfcheck.run(verbose=not args.quiet)


def add_parsers(sub):
    s = sub.add_parser("selfcheck", help="exercise the C core and report what this machine supports")
    s.add_argument("-q", "--quiet", action="store_true")
    s.set_defaults(func=_selfcheck)
