"""A UDP port free on this host right now, for tests that bind real sockets."""
import socket


def free_port(host="127.0.0.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, 0))
    p = s.getsockname()[1]
    s.close()
    return p
