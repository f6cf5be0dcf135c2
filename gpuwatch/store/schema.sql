-- Raw tables: exactly the bundle's files and columns (docs/architecture.md#data-contract, model.BUNDLE_COLUMNS), base units.
-- Nothing here is cleaned: staging.sql is the only place units, names and duplicates change.
-- Timestamps are TIMESTAMP holding UTC (the store's session time zone is UTC).

CREATE TABLE IF NOT EXISTS devices (
    node VARCHAR NOT NULL,
    gpu_uuid VARCHAR NOT NULL,
    gpu_index INTEGER,
    gpu_model VARCHAR,
    fb_total_bytes BIGINT,
    mig_gi_id INTEGER,
    mig_profile VARCHAR,
    mig_profile_id INTEGER,
    mig_placement_start INTEGER,
    mig_placement_size INTEGER,
    driver_version VARCHAR,
    cuda_driver_version VARCHAR
);
-- stores created before devices had driver versions
ALTER TABLE devices ADD COLUMN IF NOT EXISTS driver_version VARCHAR;
ALTER TABLE devices ADD COLUMN IF NOT EXISTS cuda_driver_version VARCHAR;
-- stores created before devices had topology
ALTER TABLE devices ADD COLUMN IF NOT EXISTS numa_node INTEGER;
ALTER TABLE devices ADD COLUMN IF NOT EXISTS nvlink_clique VARCHAR;

-- Samples are stored in two tables and read back through the view ``samples`` (the bundle's columns):
-- sample_keys holds each raw key once, as loaded (node, gpu_uuid, mig_gi_id, namespace, pod, container),
-- and sample_readings one row per sample with its key's id. Writing six text columns per sample cost
-- more than writing every reading. A key's id is sample_key_id() of it, except where another key already
-- holds that id (a hash collision, or a key stored by a DuckDB whose hash differed): then the key keeps
-- the id it is stored under, or takes the next free negative id (store/keys.py, keys.sql).
CREATE TABLE IF NOT EXISTS sample_keys (
    key_id BIGINT NOT NULL,
    node VARCHAR NOT NULL,
    gpu_uuid VARCHAR NOT NULL,
    mig_gi_id INTEGER,
    namespace VARCHAR,
    pod VARCHAR,
    container VARCHAR
);

CREATE TABLE IF NOT EXISTS sample_readings (
    ts TIMESTAMP NOT NULL,
    key_id BIGINT NOT NULL,
    gpu_util DOUBLE,
    gr_engine_active DOUBLE,
    sm_active DOUBLE,
    sm_occupancy DOUBLE,
    tensor_active DOUBLE,
    dram_active DOUBLE,
    fb_used_bytes DOUBLE,
    power_watts DOUBLE,
    nvlink_tx_bytes_per_second DOUBLE,
    nvlink_rx_bytes_per_second DOUBLE
);

-- A raw key's id as computed: a 63-bit DuckDB hash of the key (never negative).
CREATE OR REPLACE MACRO sample_key_id(node, gpu_uuid, mig_gi_id, namespace, pod, container) AS
    CAST(hash(node, gpu_uuid, mig_gi_id, namespace, pod, container) >> 1 AS BIGINT);

-- The samples as the bundle has them (model.BUNDLE_COLUMNS["samples"]).
CREATE OR REPLACE VIEW samples AS
SELECT r.ts, k.node, k.gpu_uuid, k.mig_gi_id, k.namespace, k.pod, k.container,
       r.gpu_util, r.gr_engine_active, r.sm_active, r.sm_occupancy, r.tensor_active, r.dram_active,
       r.fb_used_bytes, r.power_watts, r.nvlink_tx_bytes_per_second, r.nvlink_rx_bytes_per_second
FROM sample_readings r
JOIN sample_keys k USING (key_id);

CREATE TABLE IF NOT EXISTS pods (
    namespace VARCHAR NOT NULL,
    pod VARCHAR NOT NULL,
    pod_uid VARCHAR,
    node VARCHAR,
    owner_kind VARCHAR,
    owner_name VARCHAR,
    team VARCHAR,
    priority_class VARCHAR,
    start_ts TIMESTAMP,
    end_ts TIMESTAMP,
    gpu_resource VARCHAR,
    gpu_count DOUBLE,
    device_ids VARCHAR,
    labels VARCHAR
);
-- stores created before pods had labels
ALTER TABLE pods ADD COLUMN IF NOT EXISTS labels VARCHAR;

CREATE TABLE IF NOT EXISTS prices (
    gpu_model VARCHAR NOT NULL,
    usd_per_gpu_hour DOUBLE NOT NULL,
    node_label VARCHAR
);
-- stores created before prices per node label
ALTER TABLE prices ADD COLUMN IF NOT EXISTS node_label VARCHAR;

-- Node labels (kube_node_labels), for prices per node label: one JSON object per node.
CREATE TABLE IF NOT EXISTS nodes (
    node VARCHAR NOT NULL,
    labels VARCHAR
);

-- Namespace -> team for pods without a team label (stg_pods); `namespace` may be a glob (`nlp-*`):
-- an exact name wins over a glob, a longer glob over a shorter one.
CREATE TABLE IF NOT EXISTS teams (
    namespace VARCHAR NOT NULL,
    team VARCHAR NOT NULL
);

-- Pod (container) state changes from kube-state-metrics (model.BUNDLE_COLUMNS["pod_status"]).
CREATE TABLE IF NOT EXISTS pod_status (
    ts TIMESTAMP NOT NULL,
    namespace VARCHAR NOT NULL,
    pod VARCHAR NOT NULL,
    container VARCHAR,
    phase VARCHAR,
    restarts INTEGER,
    last_terminated_reason VARCHAR,
    last_exit_code INTEGER,
    waiting_reason VARCHAR,
    job VARCHAR,
    gpu_request DOUBLE,
    created_ts TIMESTAMP,
    scheduled_ts TIMESTAMP,
    unschedulable INTEGER,
    gpu_resource VARCHAR,
    node_selector VARCHAR
);
-- stores created before pod_status had pending demand
ALTER TABLE pod_status ADD COLUMN IF NOT EXISTS created_ts TIMESTAMP;
ALTER TABLE pod_status ADD COLUMN IF NOT EXISTS scheduled_ts TIMESTAMP;
ALTER TABLE pod_status ADD COLUMN IF NOT EXISTS unschedulable INTEGER;
ALTER TABLE pod_status ADD COLUMN IF NOT EXISTS gpu_resource VARCHAR;
ALTER TABLE pod_status ADD COLUMN IF NOT EXISTS node_selector VARCHAR;

-- GPU health events (model.HEALTH_KINDS): XID, ECC double-bit, row-remap failure, lost.
CREATE TABLE IF NOT EXISTS health (
    ts TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    gpu_uuid VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    code BIGINT
);

-- GPU-to-GPU links of one node (gpuwatch/topology.py LINKS), either or both directions (stg_topology).
CREATE TABLE IF NOT EXISTS topology (
    node VARCHAR NOT NULL,
    gpu_uuid VARCHAR NOT NULL,
    peer_gpu_uuid VARCHAR NOT NULL,
    link VARCHAR NOT NULL,
    nvlinks INTEGER
);

-- GPU compute processes and their pod (model.BUNDLE_COLUMNS["processes"]): in_pod 1 = in pod_uid's cgroup,
-- 0 = in no pod's cgroup, NULL = cgroup unreadable.
CREATE TABLE IF NOT EXISTS processes (
    ts TIMESTAMP NOT NULL,
    node VARCHAR NOT NULL,
    gpu_uuid VARCHAR NOT NULL,
    mig_gi_id INTEGER,
    pid BIGINT NOT NULL,
    pod_uid VARCHAR,
    in_pod INTEGER,
    fb_used_bytes DOUBLE
);

-- The batch schedulers' pending gauges (model.BUNDLE_COLUMNS["scheduler_pending"]).
CREATE TABLE IF NOT EXISTS scheduler_pending (
    ts TIMESTAMP NOT NULL,
    scheduler VARCHAR NOT NULL,
    queue VARCHAR,
    job VARCHAR,
    status VARCHAR,
    unit VARCHAR NOT NULL,
    pending DOUBLE
);

-- Reference list prices (gpuwatch/store/list_prices.csv, dated), copied in by `ingest --prices list`:
-- they price only models the cluster's own prices do not (stg_prices), and say so wherever they apply.
CREATE TABLE IF NOT EXISTS list_prices (
    gpu_model VARCHAR NOT NULL,
    usd_per_gpu_hour DOUBLE NOT NULL,
    as_of DATE NOT NULL,
    reference VARCHAR NOT NULL
);

-- One row per load: where it came from, the samples window it replaced, rows per table.
CREATE TABLE IF NOT EXISTS ingest_log (
    loaded_at TIMESTAMP,
    source VARCHAR,
    window_start TIMESTAMP,
    window_end TIMESTAMP,
    devices BIGINT,
    samples BIGINT,
    pods BIGINT,
    prices BIGINT
);

-- Readings a load from a live source refused (store/load.py: a ratio above its limit is stored as NULL,
-- unknown, and the rest loads): one row per load (its ingest_log loaded_at) and column, with how many,
-- the largest, and where the first was.
CREATE TABLE IF NOT EXISTS refused_readings (
    loaded_at TIMESTAMP,
    source VARCHAR,
    column_name VARCHAR,
    readings BIGINT,
    largest DOUBLE,
    first_ts TIMESTAMP,
    node VARCHAR,
    gpu_uuid VARCHAR
);
