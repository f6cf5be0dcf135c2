"""``gpuwatch export``: the per-node exporter (DaemonSet agent). Flags per docs/architecture.md#parts."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import tempfile
import threading
import time

from gpuwatch import units
from gpuwatch.exporter.collector import ExporterCollector
from gpuwatch.exporter.families import Options
from gpuwatch.exporter.server import serve
from gpuwatch.sources import (
    SOURCES,
    NoSourceError,
    SourceOptions,
    kubelet,
    kubelet_simulated,
    open_source,
)

log = logging.getLogger(__name__)
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--source", default="auto", choices=["auto", *SOURCES],
      help="telemetry source; auto = dcgm if its bindings import, else nvml (default: %(default)s)")
    a("--listen", default=":9400", help="[HOST]:PORT to serve /metrics and /healthz on (default: %(default)s)")
    a("--kubelet-socket", default=DEFAULT_SOCKET,
      help="kubelet pod-resources socket for pod attribution; '' disables (default: %(default)s)")
    a("--kubelet-timeout", default="2s", help="deadline for one kubelet List call (default: %(default)s)")
    a("--resource-name", action="append", default=[], metavar="NAME",
      help="extra extended-resource name to attribute (repeatable; 'prefix*' allowed)")
    a("--interval", default="1s",
      help="readings are re-read at most this often, however often /metrics is scraped (default: %(default)s)")
    a("--hostname-label", default="hostname", choices=["hostname", "Hostname"],
      help="label name for the node: dcgm-exporter <=4.5.3 used Hostname, newer hostname (default: %(default)s)")
    a("--no-profiling", action="store_true", help="do not read or serve DCGM_FI_PROF_* fields")
    a("--node-name", default=None, help="hostname label value (default: $NODE_NAME, else the host name)")
    a("--dcgm-bindings", default=None, metavar="PATH", help="directory holding DCGM's python3 bindings (pydcgm)")
    a("--dcgm-host", default=None, metavar="HOST[:PORT]",
      help="remote nv-hostengine (e.g. localhost:5555, or unix:///path); default: embedded hostengine")
    a("--simulate-gpus", type=int, default=64, help="simulate: fleet size in GPUs (default: %(default)s)")
    a("--simulate-seed", type=int, default=0, help="simulate: fleet seed (default: %(default)s)")
    a("--simulate-node", default="all", help="simulate: serve one node of the fleet, or all (default: %(default)s)")
    a("--simulate-kubelet", action="store_true",
      help="simulate: also run a fake kubelet gRPC server on a temp socket serving the fleet's pods")


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT; a bad flag is a UsageError (exit 2) before any source opens."""
    _check_flags(args)
    if args.simulate_kubelet and args.source != "simulate":
        raise units.UsageError("--simulate-kubelet needs --source simulate")
    node = args.node_name or os.environ.get("NODE_NAME") or socket.gethostname()
    options = SourceOptions(node=node, interval_s=args.interval, profiling=not args.no_profiling,
                            dcgm_bindings=args.dcgm_bindings, dcgm_host=args.dcgm_host,
                            simulate_gpus=args.simulate_gpus, simulate_seed=args.simulate_seed,
                            simulate_node=args.simulate_node)
    try:
        source = open_source(args.source, options)
    except (NoSourceError, ValueError, ImportError) as exc:  # no GPU, no bindings, no such node
        raise units.UsageError(str(exc)) from None
    stack: list = [source.close]
    try:
        allocations = _attribution(args, source, stack)
        collector = ExporterCollector(source, allocations=allocations, interval_s=args.interval,
                                      options=Options(hostname_label=args.hostname_label,
                                                      profiling=not args.no_profiling))
        try:
            server = serve(collector, args.listen)
        except OSError as exc:  # port in use, address not here: one line naming the flag (exit 1)
            raise OSError(f"--listen {args.listen}: cannot listen: {exc.strerror or exc}") from None
        stack.append(server.stop)
        log.info("serving source %s on %s (port %d): /metrics /healthz", source.name, args.listen, server.port)
        _wait_for_signal()
        return 0
    finally:
        for close in reversed(stack):
            close()


def _check_flags(args: argparse.Namespace) -> None:
    """Parse every text flag in place (gpuwatch.units' one grammar): a UsageError names the flag."""
    units.parse_listen(args.listen, what="--listen")
    args.interval = units.parse_duration(args.interval, what="--interval")
    args.kubelet_timeout = units.parse_duration(args.kubelet_timeout, what="--kubelet-timeout")


def _attribution(args: argparse.Namespace, source, stack: list):
    """The allocations reader: the kubelet socket (or a fake kubelet for the simulated fleet)."""

    socket_path = args.kubelet_socket
    if args.simulate_kubelet:
        tmp = tempfile.mkdtemp(prefix="gpuwatch-kubelet-")
        socket_path = os.path.join(tmp, "kubelet.sock")
        fake = kubelet_simulated.serve(socket_path, pods=lambda: kubelet_simulated.pods_from_fleet(source.fleet, node=source.node,
                                                               t=source.fleet_time(time.time())))
        stack.append(lambda: (fake.stop(), os.rmdir(tmp)))
        log.info("simulated kubelet serving the fleet's allocations on %s", socket_path)
    if not socket_path:
        return None
    client = kubelet.Client(socket_path)
    stack.append(client.close)
    names = (*kubelet.DEFAULT_RESOURCE_NAMES, *args.resource_name)
    return lambda: client.list_allocations(timeout=args.kubelet_timeout, resource_names=names)


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
