"""Two nodes on real sockets (node 1 publishes, node 2 receives), for the
receive-path tests."""
from rpbcast import Config, MemberSpec
from rpbcast.api import Node
from ports import free_port


def pair(transport="multicast", group="239.255.91", **kw):
    """Node 1 publishes, node 2 receives."""
    ports = {1: free_port(), 2: free_port()}
    specs = [MemberSpec(i, f"127.0.0.1:{p}") for i, p in ports.items()]
    nodes = {}
    for i, p in ports.items():
        cfg = dict(node_id=i, bind=f"127.0.0.1:{p}", members=specs, transport=transport,
                   gossip_interval=0.02, group_addr=f"{group}.{1 + ports[1] % 200}:{ports[1] + 1000}")
        cfg.update(kw)
        nodes[i] = Node(Config(**cfg))
    return nodes[1], nodes[2]


def close(*nodes):
    for n in nodes:
        n.close(linger=0)


def take(node, got, timeout):
    """One message into got (seq -> times), its payload checked."""
    m = node.receive(timeout=timeout)
    if m is not None:
        assert bytes(m.payload) == b"m%d" % m.seq
        got[m.seq] = got.get(m.seq, 0) + 1
    return m
