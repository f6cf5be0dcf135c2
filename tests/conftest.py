"""Shared test set-up: --update-golden, the gpu and slow markers, and the repository paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data" / "real"
GOLDEN = ROOT / "tests" / "golden"
FIXTURES = ROOT / "tests" / "fixtures"


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files from current output")


# Left out of `make test-fast` (pytest -m "not slow") besides the tests marked slow in their files: what
# they are, and their ids (a file, or file::test with all its parameters). Each costs over half a CPU-second
# (measured one by one, per-test CPU time); `make test` runs them all, nothing here is skipped.
SLOW: dict[str, tuple[str, ...]] = {
    "the app's pages (Streamlit AppTest) and the weekly report, over whole stores": (
        "tests/test_app.py", "tests/test_app_charts.py", "tests/test_app_topology.py", "tests/test_report.py",
        "tests/test_app_pages.py", "tests/test_app_unpriced.py", "tests/test_app_failsafe.py", "tests/test_idle_bridge.py",
        "tests/test_money_surfaces.py", "tests/test_report_unpriced.py", "tests/test_judgement.py",
        "tests/test_money_rules.py"),
    "commands run as real processes against real servers: CLI edges, Prometheus replies that trickle or lie": (
        "tests/test_cli_edges.py", "tests/test_ingest_failsafe_replies.py", "tests/test_failsafe_inputs_round2.py",
        "tests/test_dashboards_prometheus.py", "tests/test_cli_errors.py"),
    "kill and replay proofs: gpuwatch runs SIGKILLed mid-write, stores loaded hour by hour": (
        "tests/test_durability.py", "tests/test_rollup.py", "tests/test_store_incremental.py"),
    "detection accuracy and findings over simulated fleets and real traces": (
        "tests/test_accuracy.py", "tests/test_accuracy_failures.py", "tests/test_accuracy_topology.py",
        "tests/test_failure_findings_a.py", "tests/test_failure_findings_b.py", "tests/test_blocked_demand_openb.py",
        "tests/test_fleet_timeseries.py", "tests/test_simulate.py", "tests/test_reclaim_oracle.py",
        "tests/test_fgd.py::test_fgd_on_the_real_openb_trace", "tests/test_chargeback.py::test_dlrm_allocation_trace_reconciles",
        "tests/test_billing_presence.py", "tests/test_clusters_failsafe.py",
        "tests/test_real_h100.py::test_false_utilization_on_the_four_load_trace_flags_the_spin_kernel_and_nothing_else",
        "tests/test_store_real.py::test_idle_share_matches_raw_computation",
        "tests/test_fleet_failures.py::test_the_bundle_carries_the_failures_and_loads",
        "tests/test_ingest_topology.py::test_real_single_gpu_captures",
        "tests/test_ingest_topology.py::test_documented_layouts_through_the_store_by_stored_uuids",
        "tests/test_blocked_demand.py::test_a_short_block_is_not_blocked",
        "tests/test_blocked_demand.py::test_fragmented_pool_blocks_a_pod_it_could_hold"),
    "whole sample_data stores: ingest and analyze runs, persisted results, clusters, teams, the lake": (
        "tests/test_analyses.py::test_header_columns_match_the_result",
        "tests/test_analyses.py::test_golden_outputs_on_sample_data", "tests/test_analyses.py::test_golden_rightsizing",
        "tests/test_analyses.py::test_design_leading_columns", "tests/test_analyses.py::test_analyze_command_writes_every_file",
        "tests/test_analyses.py::test_savings_never_exceed_the_observed_waste_they_remove",
        "tests/test_analyses.py::test_windows_holding_the_same_data_give_the_same_savings",
        "tests/test_analyses_persisted.py", "tests/test_clusters.py", "tests/test_teams.py", "tests/test_findings_csv.py",
        "tests/test_reclaim_controller.py", "tests/test_lake_s3.py", "tests/test_sample_store.py",
        "tests/test_ingest_bundle.py::test_analysis_output_is_deterministic",
        "tests/test_ingest_bundle.py::test_ingest_command_is_idempotent",
        "tests/test_ingest_bundle.py::test_linked_parquet_stages_the_same_as_a_copy",
        "tests/test_ingest_bundle.py::test_a_store_linked_before_samples_became_keys_and_readings_stays_linked",
        "tests/test_ingest_bundle.py::test_samples_without_sm_active_give_idle_findings_and_unknown_effective",
        "tests/test_findings_exporter.py::test_findings_match_the_analysis_frames",
        "tests/test_findings_exporter.py::test_gang_stalls_and_mig_mismatches_are_served_from_their_frames",
        "tests/test_findings_exporter.py::test_results_are_cached_for_the_ttl",
        "tests/test_chargeback_failsafe.py::test_every_total_says_what_is_unpriced_and_what_was_capped",
        "tests/test_prices.py::test_a_price_per_node_label_prices_the_gpus_on_those_nodes",
        "tests/test_prices.py::test_list_prices_fill_in_and_the_clusters_price_wins_whatever_the_order",
        "tests/test_store.py::test_a_full_refresh_merges_every_kind_of_duplicate_and_only_its_node",
        "tests/test_store.py::test_the_small_staged_tables_are_their_definitions_after_every_kind_of_load",
        "tests/test_reclaim_apply.py::test_restore_undoes_each_kind",
        "tests/test_reclaim_freshness.py::test_no_as_of_time_means_no_action_a_log_line_and_an_audit_row"),
    "property searches (hypothesis, brute force)": (
        "tests/test_fuzz_inputs.py", "tests/test_chargeback.py::test_chargeback_reconciles_for_random_fleets",
        "tests/test_fuzz_replies.py", "tests/test_fuzz_clusters.py", "tests/test_fuzz_prices.py",
        "tests/test_fgd.py::test_random_clusters_match_brute_force", "tests/test_mig.py::test_repack_is_valid_optimal_and_never_worse",
        "tests/test_mig.py::test_every_enumerated_layout_is_valid_unique_and_none_missing",
        "tests/test_reclaim_plan.py::test_plan_does_not_depend_on_input_order", "tests/test_reclaim_plan.py::test_policy_laws"),
    "bad-input matrices, each case through a real load or a command": (
        "tests/test_ingest_bundle.py::test_bad_input_is_a_clear_error_and_nothing_is_loaded",
        "tests/test_ingest_bundle.py::test_timestamps_outside_the_sane_range_are_refused_in_every_format",
        "tests/test_ingest_bundle.py::test_parquet_bad_value_names_file_column_and_row",
        "tests/test_ingest_bundle.py::test_csv_and_parquet_bundles_load_the_same",
        "tests/test_ingest_topology.py::test_bad_input_is_one_line_and_leaves_the_store",
        "tests/test_ingest_topology.py::test_bad_link_label_in_a_metrics_file_exits_1_and_leaves_the_store",
        "tests/test_ingest_topology.py::test_cluster_qualified_node_finds_its_stored_devices",
        "tests/test_ingest_scheduler_pending.py::test_bad_rows_name_column_and_row_and_leave_the_store_alone",
        "tests/test_store_failure_tables.py::test_a_bad_cell_names_file_column_and_row_and_loads_nothing",
        "tests/test_store_topology.py::test_bad_rows_name_file_column_and_row_and_leave_the_store_alone",
        "tests/test_store.py::test_a_percent_in_a_ratio_column_is_refused",
        "tests/test_chargeback_failsafe.py::test_absurd_money_inputs_are_refused_at_load",
        "tests/test_prices.py::test_a_bad_node_label_selector_is_refused",
        "tests/test_exporter_cli.py::test_bad_input_exits_2_with_reason",
        "tests/test_exporter_counters.py::test_export_with_a_bad_counters_file_is_one_line_and_exit_2",
        "tests/test_exporter_pod_meta.py::test_the_flags_need_a_node_name_and_a_valid_allowlist",
        "tests/test_contracts.py::test_command_help_works"),
    "Helm's engine rendering the chart, kubernetes-validate, promtool, image contexts": (
        "tests/test_helm_scripts.py", "tests/test_helm_exporter_run.py", "tests/test_helm_exporter_mode.py",
        "tests/test_helm_reclaim_rbac.py",
        "tests/test_helm.py::test_components_can_be_switched_off_one_by_one",
        "tests/test_helm.py::test_every_builtin_object_validates_against_current_kubernetes",
        "tests/test_helm.py::test_exporter_security_context", "tests/test_helm.py::test_the_chart_installs_with_prices_from_values",
        "tests/test_helm_network.py::test_every_object_validates_against_current_kubernetes",
        "tests/test_helm_opencost.py::test_each_service_rule_finds_exactly_the_exporters_discovery_service",
        "tests/test_helm_policy.py::test_every_built_in_kind_renders",
        "tests/test_helm_policy.py::test_the_chart_refuses_exactly_what_the_controller_refuses",
        "tests/test_rules.py::test_every_alert_is_tested_firing_and_quiet_with_both_exporters",
        "tests/test_rules.py::test_promtool_unit_tests_pass", "tests/test_dashboards.py::test_every_queried_metric_exists",
        "tests/test_images.py::test_the_gpuwatch_image_installs_everything_the_charts_commands_import"),
}


def pytest_collection_modifyitems(config, items):
    _mark_slow(items)
    if _gpu_present():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine (needs /dev/nvidia0 and libnvidia-ml)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _mark_slow(items) -> None:
    """Mark the tests SLOW names slow; a name whose file is gone is an error, not a silent no-op."""
    names = [name for group in SLOW.values() for name in group]
    gone = sorted(name for name in names if not (ROOT / name.split("::")[0]).is_file())
    if gone:
        raise pytest.UsageError(f"tests/conftest.py SLOW names files that do not exist: {', '.join(gone)}")
    prefixes = tuple(name + tail for name in names for tail in ("::", "["))
    for item in items:
        if item.nodeid in names or item.nodeid.startswith(prefixes):
            item.add_marker(pytest.mark.slow)


def _gpu_present() -> bool:
    return os.path.exists("/dev/nvidia0") and os.environ.get("GPUWATCH_NO_GPU") != "1"


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def golden(update_golden):
    """``golden(path, text)``: compare ``text`` with ``tests/golden/<path>``, or rewrite it."""

    def check(relpath: str, text: str) -> None:
        path = GOLDEN / relpath
        if update_golden or not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if not update_golden:
                pytest.fail(f"golden file {path} did not exist; written now — review and commit it")
        assert text == path.read_text(), f"output differs from {path}; run pytest --update-golden and review the diff"

    return check


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"real traces not found at {SHARED_DATA}")
    return SHARED_DATA
