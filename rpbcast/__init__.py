"""rpbcast: reliable multicast for publish/subscribe systems and trading feeds."""

__version__ = "0.1.0"
