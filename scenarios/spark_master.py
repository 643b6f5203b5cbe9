"""Whether a cluster master can be reached, asked before Spark starts on it.

Spark's own start on a master nobody answers at is slow and says little: a standalone
client retries its registration for a minute (3 x 20 s) and then fails with "Cannot call
methods on a stopped SparkContext"; a Kubernetes client prints pages of Java traces
ending in "An error has occurred"; `yarn` without a Hadoop configuration stops the JVM
("Java gateway process exited"). A TCP connection to the master's address, tried for a
few seconds, tells the person at once which address does not answer and why.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

#: Seconds a connection to the master may take before it counts as unreachable.
CONNECT_TIMEOUT = 5.0

#: Spark's rule for `--master yarn` (SparkSubmitArguments): one of these must be set.
YARN_CONF_VARIABLES = ("HADOOP_CONF_DIR", "YARN_CONF_DIR")


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The (host, port) addresses the driver connects to for `master`: each master of a
    `spark://H1:P1,H2:P2` URL, the API server of `k8s://[https://]HOST[:PORT]`; none for
    other masters, or a URL Spark itself refuses (a `spark://` address without a port)."""
    if master.startswith("spark://"):
        addresses = []
        for part in master[len("spark://"):].split(","):
            host, _, port = part.rpartition(":")
            if not host or not port.isdigit():
                return []
            addresses.append((host.strip("[]"), int(port)))
        return addresses
    if master.startswith("k8s://"):
        rest = master[len("k8s://"):]
        url = urlsplit(rest if "://" in rest else f"https://{rest}")
        try:
            port = url.port or (80 if url.scheme == "http" else 443)
        except ValueError:
            return []
        return [(url.hostname, port)] if url.hostname else []
    return []


def _connect_error(host: str, port: int, timeout: float) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except socket.timeout:
        return f"no answer within {timeout:g} s"
    except OSError as e:
        return e.strerror or str(e)


def unreachable_master(master: str, timeout: float = CONNECT_TIMEOUT) -> str | None:
    """Why Spark could not start on `master` (None if nothing is known to be wrong): no
    address of it accepts a TCP connection within `timeout`, or `yarn` has no Hadoop
    configuration to find its ResourceManager."""
    if master == "yarn" and not any(os.environ.get(name) for name in YARN_CONF_VARIABLES):
        return f"set {' or '.join(YARN_CONF_VARIABLES)} to the folder of the cluster's Hadoop configuration"
    addresses = master_addresses(master)
    errors = [(host, port, _connect_error(host, port, timeout)) for host, port in addresses]
    if not addresses or any(error is None for _, _, error in errors):
        return None
    what = "the Kubernetes API server" if master.startswith("k8s://") else "the Spark master"
    return "cannot reach " + "; ".join(f"{what} at {host}:{port} ({error})" for host, port, error in errors)
