"""`gpuwatch reclaim`: the auto-reclaim controller (dry-run unless --apply), and `restore`."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from datetime import timedelta

from gpuwatch import store, units
from gpuwatch.reclaim import controller, kube, owners, policy, summary
from gpuwatch.reclaim.apply import record_restore
from gpuwatch.reclaim.notify import webhook_notifier
from gpuwatch.reclaim.policy import PolicyError
from gpuwatch.reclaim.records import as_utc
from gpuwatch.reclaim.telemetry import ReclaimMetrics

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `gpuwatch reclaim` and of its `restore` subcommand."""
    parser.add_argument("--policy", help="policy YAML (see examples/reclaim-policy.yaml); default: built-in safe defaults")
    parser.add_argument("--db", help="DuckDB store: findings are computed from it and the audit is written to it")
    parser.add_argument("--findings", help="idle_hoarding.csv from `gpuwatch analyze --out` instead of --db's analysis")
    parser.add_argument("--apply", action="store_true", help="really act (default: dry-run, nothing is written)")
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    parser.add_argument("--interval", default="5m", help="time between passes (default: %(default)s)")
    parser.add_argument("--window", default="24h", help="data looked back over for idle runs (default: %(default)s)")
    parser.add_argument("--now", help="pin the clock (ISO-8601, UTC); default: now, or the data's end when offline")
    parser.add_argument("--assume-opted-in", action="store_true",
                        help="dry-run counterfactual: treat every namespace as opted in (refused with --apply)")
    parser.add_argument("--no-cluster", action="store_true", help="do not contact Kubernetes: plan from the store only")
    parser.add_argument("--counterfactual", action="store_true",
                        help="print 'would have reclaimed N GPU-hours = $X' from the dry-run audit over --window")
    parser.add_argument("--replay", metavar="STEP",
                        help="dry-run counterfactual: replay a pass every STEP (e.g. 15m) over the stored data, "
                             "audit every decision, then print the counterfactual (no cluster consulted)")
    parser.add_argument("--metrics-listen", metavar="HOST:PORT", help="serve gpuwatch_reclaim_* metrics on HOST:PORT (e.g. :9402)")
    parser.add_argument("--no-leader-elect", action="store_true", help="skip the Lease (single replica only)")
    parser.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "gpuwatch"),
                        help="namespace of the leader-election Lease (default: $POD_NAMESPACE or %(default)s)")
    parser.add_argument("--lease-name", default="gpuwatch-reclaim", help="Lease name (default: %(default)s)")
    _kube_arguments(parser)
    sub = parser.add_subparsers(dest="reclaim_command", metavar="SUBCOMMAND")
    restore = sub.add_parser("restore", help="undo a reclaim: NAMESPACE/KIND/NAME (replicas back, Job resumed, "
                                             "Notebook started)")
    restore.add_argument("target", help="e.g. ml-team/Deployment/jupyter-alice")
    restore.add_argument("--force", action="store_true", help="restore even if gpuwatch did not stop it")
    restore.add_argument("--policy", dest="restore_policy", metavar="FILE", help="policy YAML (needed for custom_kinds)")
    restore.add_argument("--db", dest="restore_db", metavar="FILE", help="DuckDB store to record the `restored` audit row in")
    _kube_arguments(restore, dest_prefix="restore_")


def _kube_arguments(parser: argparse.ArgumentParser, dest_prefix: str = "") -> None:
    parser.add_argument("--kube-host", dest=f"{dest_prefix}kube_host", metavar="URL", help="API server URL (e.g. from `kubectl proxy`)")
    parser.add_argument("--kubeconfig", dest=f"{dest_prefix}kubeconfig", metavar="FILE", help="kubeconfig file (default: ~/.kube/config)")
    parser.add_argument("--context", dest=f"{dest_prefix}context", metavar="NAME", help="kubeconfig context")
    parser.add_argument("--in-cluster", dest=f"{dest_prefix}in_cluster", action="store_true",
                        help="use the pod's service account")
    parser.add_argument("--kube-timeout", dest=f"{dest_prefix}kube_timeout", type=float, default=10.0, metavar="S",
                        help="seconds per API request (default: %(default)s)")


def run(args: argparse.Namespace) -> int:

    try:
        if getattr(args, "reclaim_command", None) == "restore":
            return _restore(args)
        return _reconcile(args)
    except (PolicyError, ValueError) as exc:
        print(f"gpuwatch reclaim: {exc}", file=sys.stderr)
        return 2


def _connector(args, rules, prefix: str = ""):

    def connect():
        get = lambda name: getattr(args, f"{prefix}{name}")  # noqa: E731
        cluster = kube.connect(host=get("kube_host"), kubeconfig=get("kubeconfig"), context=get("context"),
                               in_cluster=get("in_cluster"), timeout_seconds=get("kube_timeout"))
        cluster.custom.update({k: (c.group, c.version, c.plural) for k, c in rules.custom_kinds.items()})
        return cluster

    return connect


def _reconcile(args) -> int:

    if args.assume_opted_in and args.apply:
        raise ValueError("--assume-opted-in is for dry-run counterfactuals only; it is refused with --apply")
    if not args.db and not args.findings:
        raise ValueError("give --db (a store from `gpuwatch ingest`) or --findings (idle_hoarding.csv)")
    rules = policy.load(args.policy) if args.policy else policy.Policy()
    settings = controller.Settings(
        policy=rules, findings_csv=args.findings, apply=args.apply,
        window=_duration(args.window, what="--window"), assume_opted_in=args.assume_opted_in,
        now=as_utc(units.parse_utc(args.now, what="--now")) if args.now else None, leader_elect=not args.no_leader_elect,
        lease_namespace=args.lease_namespace, lease_name=args.lease_name,
        lease_seconds=int(2 * _duration(args.interval, what="--interval").total_seconds()) + 60,
        identity=f"{socket.gethostname()}-{os.getpid()}", notify=webhook_notifier(rules.webhooks))
    con = store.connect(args.db)
    metrics = ReclaimMetrics()
    if args.metrics_listen:
        metrics.serve(args.metrics_listen)
    if args.replay:
        return _replay(settings, con, step=_duration(args.replay, what="--replay"))
    connect = (lambda: None) if args.no_cluster else _connector(args, rules)
    if not args.once:
        controller.loop(settings, con, connect, metrics=metrics,
                        interval_seconds=_duration(args.interval, what="--interval").total_seconds())
        return 0
    result = controller.run_once(settings, con, controller._connect(connect), metrics=metrics)
    print(summary.render(result, apply=args.apply))
    if args.counterfactual:
        start = result.now - settings.window
        print(summary.counterfactual(con, start=start, end=result.now + timedelta(seconds=1)))
    return 0


def _replay(settings, con, *, step) -> int:

    if not settings.policy.namespaces and not settings.assume_opted_in:
        log.warning("no namespace is opted in: list them in the policy's namespaces or pass --assume-opted-in")
    results = controller.replay(settings, con, step=step)
    if not results:
        print("gpuwatch reclaim --replay: the store holds no data")
        return 0
    first, last = results[0].now, results[-1].now
    decisions = sum(len(r.rows) for r in results)
    print(f"Replayed {len(results)} dry-run passes every {step} from {first:%Y-%m-%d %H:%M} to "
          f"{last:%Y-%m-%d %H:%M} UTC ({decisions} decisions audited; the cluster was NOT consulted).")
    print(summary.counterfactual(con, start=first, end=last + timedelta(seconds=1)))
    return 0


def _restore(args) -> int:

    parts = args.target.split("/")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"restore target {args.target!r}: expected NAMESPACE/KIND/NAME, e.g. ml/Deployment/web")
    namespace, kind, name = parts
    rules = policy.load(args.restore_policy) if args.restore_policy else policy.Policy()
    try:
        cluster = _connector(args, rules, prefix="restore_")()
        done = owners.restore(cluster, kind, namespace, name, custom=rules.custom_kinds, force=args.force)
    except kube.KubeError as exc:
        print(f"gpuwatch reclaim restore: {exc}", file=sys.stderr)
        return 1
    con = None
    if args.restore_db:

        con = store.connect(args.restore_db)
    record_restore(cluster, con, namespace=namespace, kind=kind, name=name, detail=done)
    print(f"{namespace}/{kind}/{name}: {done}")
    return 0


def _duration(text: str, *, what: str) -> timedelta:
    return timedelta(seconds=units.parse_duration(text, what=what))
