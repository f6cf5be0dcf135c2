"""``gpuwatch export``: the per-node exporter (DaemonSet agent). Flags per docs/architecture.md#parts."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import os
import signal
import socket
import tempfile
import threading
import time

from gpuwatch import units
from gpuwatch.exporter import compat, counters
from gpuwatch.exporter.collector import ExporterCollector
from gpuwatch.exporter.exp import ExpMetrics
from gpuwatch.exporter.server import serve
from gpuwatch.sources import (
    SOURCES,
    NoSourceError,
    SourceOptions,
    cgroup_pods,
    dcgm,
    dcgm_topology,
    kube_pods,
    kubelet,
    kubelet_simulated,
    nvml_parse,
    nvml_topology,
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
    a("--compat", default=compat.DEFAULT, choices=[*compat.PROFILES, *compat.ALIASES], metavar="PROFILE",
      help="whose conventions /metrics follows, by the dcgm-exporter releases each reproduces: "
      + "; ".join(compat.describe(k) for k in compat.PROFILES).replace("%", "%%")
      + "; " + ", ".join(f"{a} = {k}" for a, k in compat.ALIASES.items())
      + " (default: %(default)s; README 'Compatibility profiles')")
    a("--kubernetes-virtual-gpus", action="store_true",
      help="shared GPUs (time-slicing, MPS): also serve each pod's own GPU_UTIL and FB_USED as series with its "
           "labels beside the device's series (on in --compat gpuwatch)")
    a("--kubernetes-enable-pod-uid", action="store_true",
      help="add pod_uid to attributed series (pods on this node listed from the Kubernetes API; RBAC: list pods)")
    a("--kubernetes-enable-pod-labels", action="store_true",
      help="add the pod's labels (names sanitized to [a-zA-Z0-9_]) to attributed series, from the Kubernetes API")
    a("--kubernetes-pod-label-allowlist-regex", default=None, metavar="REGEX[,REGEX...]",
      help="only pod labels whose key one of these patterns matches (searched in the original key); default: all")
    a("--kubernetes-api", default=None, metavar="URL",
      help="Kubernetes API URL for pod UID/labels outside a pod (e.g. kubectl proxy's http://127.0.0.1:8001); "
           "default: the in-cluster service account")
    a("--hostname-label", default=None, choices=["hostname", "Hostname"],
      help="label name for the node (default: the --compat profile's: Hostname for releases before "
           f"{compat.HOSTNAME_RENAMED_IN} (dcgm-exporter-4.8.2), else hostname)")
    a("--no-profiling", action="store_true", help="do not read or serve DCGM_FI_PROF_* fields")
    a("-f", "--collectors", default=None, metavar="FILE",
      help="dcgm-exporter counters CSV (NAME, TYPE, HELP per line): serve exactly these DCGM fields (any field "
           "by name or id, TYPE and HELP from the file) and the DCGM_EXP_* rows gpuwatch computes; with --source nvml "
           "only the fields NVML provides (README metrics table)")
    a("--proc-root", default=None, metavar="PATH",
      help="the host's /proc (mounted read-only, e.g. /host/proc): resolve each GPU compute process's pod from "
           "its cgroup and serve gpuwatch_process_memory_bytes (nvml source; NVML reports host PIDs). Default: off")
    a("--xid-count-window-size", type=int, default=300000, metavar="MS",
      help="DCGM_EXP_XID_ERRORS_COUNT window in milliseconds (default: %(default)s)")
    a("--clock-events-count-window-size", type=int, default=300000, metavar="MS",
      help="DCGM_EXP_CLOCK_EVENTS_COUNT window in milliseconds (default: %(default)s)")
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
    rows = _counters(args)
    owner = _owner(args)
    options = SourceOptions(node=node, interval_s=args.interval, profiling=not args.no_profiling,
                            extra_field_ids=counters.field_ids(rows) if rows else (),
                            dcgm_bindings=args.dcgm_bindings, dcgm_host=args.dcgm_host,
                            simulate_gpus=args.simulate_gpus, simulate_seed=args.simulate_seed,
                            simulate_node=args.simulate_node)
    try:
        source = open_source(args.source, options)
    except (NoSourceError, ValueError, ImportError) as exc:  # no GPU, no bindings, no such node
        raise units.UsageError(str(exc)) from None
    stack: list = [source.close]
    try:
        allocations, allocatable = _attribution(args, source, stack)
        served = compat.options(args.compat, hostname_label=args.hostname_label,
                                virtual_gpus=args.kubernetes_virtual_gpus, profiling=not args.no_profiling)
        collector = ExporterCollector(source, allocations=allocations, interval_s=args.interval,
                                      options=dataclasses.replace(served, counters=rows,
                                                                  pod_uid=args.kubernetes_enable_pod_uid),
                                      exp=_exp(args, rows), pods=_pod_metadata(args, node),
                                      topology=_topology(source), allocatable=allocatable, owner=owner)
        try:
            server = serve(collector, args.listen)
        except OSError as exc:  # port in use, address not here: one line naming the flag (exit 1)
            raise OSError(f"--listen {args.listen}: cannot listen: {exc.strerror or exc}") from None
        stack.append(server.stop)
        log.info("serving source %s on %s (port %s): /metrics /healthz", source.name, args.listen, server.port)
        _wait_for_signal()
        return 0
    finally:
        for close in reversed(stack):
            close()


def _counters(args: argparse.Namespace) -> tuple | None:
    """The counters file's rows (``-f``), names resolved through DCGM's bindings; None without one."""
    if args.collectors is None:
        return None
    if args.source == "nvml":  # names through gpuwatch's own field table; only what NVML provides
        rows = counters.read_counters(args.collectors, counters.gpuwatch_fields())
        counters.check_provided(rows, nvml_parse.PROVIDED_FIELD_IDS, path=args.collectors, source="nvml")
        return rows
    if args.source not in ("dcgm", "auto"):
        raise units.UsageError(f"--collectors needs --source dcgm or nvml (DCGM field names and ids), not {args.source}")
    try:
        bindings = dcgm.load_bindings(args.dcgm_bindings)
    except ImportError as exc:
        raise units.UsageError(f"--collectors {args.collectors}: {exc}") from None
    args.source = "dcgm"
    return counters.read_counters(args.collectors, bindings.dcgm_fields)


def _owner(args: argparse.Namespace):
    """``--proc-root``: each compute process's pod from its cgroup (sources/cgroup_pods.py), or None."""
    if args.proc_root is None:
        return None
    if not os.path.isdir(args.proc_root):
        raise units.UsageError(f"--proc-root {args.proc_root}: not a directory (mount the host's /proc read-only)")
    return functools.partial(cgroup_pods.resolve_pid, proc_root=args.proc_root)


def _pod_metadata(args: argparse.Namespace, node: str):
    """The pod UID/labels reader (``--kubernetes-enable-pod-uid/-labels``), or None. The node is
    ``--node-name`` or ``$NODE_NAME`` only: the host name inside a pod is the pod's name."""
    if not (args.kubernetes_enable_pod_uid or args.kubernetes_enable_pod_labels):
        return None
    named = args.node_name or os.environ.get("NODE_NAME") or ""
    try:
        reader = kube_pods.open_pod_metadata(node=named, labels=args.kubernetes_enable_pod_labels,
                                             allowlist=args.kubernetes_pod_label_allowlist_regex,
                                             api_url=args.kubernetes_api)
    except kube_pods.KubePodsError as exc:
        raise units.UsageError(f"--kubernetes-enable-pod-{'labels' if args.kubernetes_enable_pod_labels else 'uid'}: "
                               f"{exc}") from None
    log.info("pod UID/labels for node %s from the Kubernetes API", node)
    return reader.get


def _exp(args: argparse.Namespace, rows: tuple | None) -> ExpMetrics | None:
    """The DCGM_EXP_* metrics the counters file lists, with their windows (None if it lists none)."""
    wanted = [c for c in rows or () if c.field_id is None]
    if not wanted:
        return None
    return ExpMetrics(wanted, windows={"DCGM_EXP_XID_ERRORS_COUNT": args.xid_count_window_size / 1000,
                                       "DCGM_EXP_CLOCK_EVENTS_COUNT": args.clock_events_count_window_size / 1000})


def _check_flags(args: argparse.Namespace) -> None:
    """Parse every text flag in place (gpuwatch.units' one grammar): a UsageError names the flag."""
    units.parse_listen(args.listen, what="--listen")
    args.interval = units.parse_duration(args.interval, what="--interval")
    args.kubelet_timeout = units.parse_duration(args.kubelet_timeout, what="--kubelet-timeout")
    for flag in ("xid_count_window_size", "clock_events_count_window_size"):
        if getattr(args, flag) <= 0:
            raise units.UsageError(f"--{flag.replace('_', '-')}: {getattr(args, flag)} must be a positive number of ms")


def _topology(source):
    """The reader of the node's GPU topology for the source in use (docs/architecture.md#topology)."""
    if source.name == "nvml":
        return lambda: nvml_topology.read_topology(source.nvml)
    if source.name == "dcgm":
        return lambda: dcgm_topology.read_source(source)
    return getattr(source, "topology", None)  # simulate: the fleet's layouts


def _attribution(args: argparse.Namespace, source, stack: list):
    """The allocations and allocatable-devices readers: the kubelet socket (or a fake kubelet for the
    simulated fleet); (None, None) without a socket."""

    socket_path = args.kubelet_socket
    if args.simulate_kubelet:
        tmp = tempfile.mkdtemp(prefix="gpuwatch-kubelet-")
        socket_path = os.path.join(tmp, "kubelet.sock")
        fake = kubelet_simulated.serve(socket_path, pods=lambda: kubelet_simulated.pods_from_fleet(source.fleet, node=source.node,
                                                               t=source.fleet_time(time.time())),
                                       allocatable=lambda: kubelet_simulated.allocatable_from_fleet(source.fleet,
                                                                                                    node=source.node))
        stack.append(lambda: (fake.stop(), os.rmdir(tmp)))
        log.info("simulated kubelet serving the fleet's allocations on %s", socket_path)
    if not socket_path:
        return None, None
    client = kubelet.Client(socket_path)
    stack.append(client.close)
    names = (*kubelet.DEFAULT_RESOURCE_NAMES, *args.resource_name)
    return (lambda: client.list_allocations(timeout=args.kubelet_timeout, resource_names=names),
            lambda: client.get_allocatable_devices(timeout=args.kubelet_timeout, resource_names=names))


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
