"""The Host names a server answers: ATTNLAB_ALLOWED_HOSTS, plus this machine's own addresses when it is bound to
one that others can reach (`attnlab serve --host 0.0.0.0` for a class).

A Host header outside the list is refused (DNS rebinding: a page on evil.test that resolves its name to this
machine must not read attnlab's answers). A person who binds a non-loopback address means to be reached by it, so
the addresses of the machine's interfaces, and its host name, are added; everything is found on the machine itself
(the interface table, the host name's own resolution), nothing is asked of the network.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import struct
import sys
from collections.abc import Iterable
from pathlib import Path

WILDCARDS = ("0.0.0.0", "::", "")
SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address
IF_INET6 = Path("/proc/net/if_inet6")  # Linux: every interface's IPv6 addresses


def is_loopback(bind: str) -> bool:
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind.strip("[]")).is_loopback
    except ValueError:
        return False


def _ipv4_interfaces() -> list[str]:
    """The IPv4 address of each interface (Linux's SIOCGIFADDR), else the one the default route leaves by."""
    found: list[str] = []
    if sys.platform.startswith("linux"):
        import fcntl

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _, name in socket.if_nameindex():
                with contextlib.suppress(OSError):
                    raw = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
                    found.append(socket.inet_ntoa(raw[20:24]))
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # a UDP connect sends nothing: it only picks the route (TEST-NET-1)
        found.append(s.getsockname()[0])
    return found


def _ipv6_interfaces() -> list[str]:
    """The IPv6 addresses of the interfaces (Linux's /proc/net/if_inet6); link-local ones need a zone no URL carries."""
    with contextlib.suppress(OSError):
        rows = IF_INET6.read_text().split()
        return [
            str(ipaddress.IPv6Address(int(rows[i], 16)))
            for i in range(0, len(rows), 6)
            if not ipaddress.IPv6Address(int(rows[i], 16)).is_link_local
        ]
    return []


def _resolved(name: str) -> list[str]:
    """What `name` resolves to on this machine (its hosts file, or the resolver it is configured with)."""
    with contextlib.suppress(OSError, UnicodeError):
        return [str(info[4][0]) for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)]
    return []


def own_addresses(bind: str) -> list[str]:
    """The names and addresses of this machine that a browser may send as Host when the server is bound to `bind`:
    none for a loopback bind (the defaults cover it), else the host name and the addresses it resolves to, and for
    0.0.0.0 (or ::) every interface's address. Loopback addresses are left out (the defaults name them)."""
    if is_loopback(bind):
        return []
    wildcard = bind in WILDCARDS
    v6 = bind == "::" or (not wildcard and ":" in bind)
    hostname = socket.gethostname()
    found: list[str] = [] if wildcard else [bind.strip("[]"), *_resolved(bind)]
    if wildcard:
        found += [hostname, *_resolved(hostname), *_ipv4_interfaces()]
        if v6:
            found += _ipv6_interfaces()
    names: list[str] = []
    for a in found:
        try:
            ip = ipaddress.ip_address(a.split("%")[0])
        except ValueError:
            names.append(a.lower())  # a host name
            continue
        if ip.is_loopback or ip.is_unspecified or (ip.version == 6 and not v6 and wildcard):
            continue
        names.append(f"[{ip}]" if ip.version == 6 else str(ip))
    return _unique(names)


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(n for n in names if n))


def answered_hosts(configured: list[str], bind: str) -> list[str]:
    """The allow-list a server bound to `bind` uses: the configured names, then this machine's own addresses."""
    return _unique([*configured, *own_addresses(bind)])


def start_line(hosts: list[str], bind: str, port: int) -> str:
    """One start-up line: where the server listens, which Host names it answers, and the setting that adds names."""
    if "*" in hosts:
        return f"attnlab listens on {bind}:{port} and answers any Host name (ATTNLAB_ALLOWED_HOSTS=*)"
    urls = ", ".join(f"http://{h}:{port}" for h in hosts if not h.startswith("*.") and h != "::1")
    under = [h[2:] for h in hosts if h.startswith("*.")]
    also = f" and any name under {', '.join(under)}" if under else ""
    return (
        f"attnlab listens on {bind}:{port} and answers {urls}{also}; a browser that reaches it by another name is"
        " refused: add that name to ATTNLAB_ALLOWED_HOSTS (comma-separated)"
    )
