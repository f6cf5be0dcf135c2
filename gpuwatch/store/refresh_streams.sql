-- The small staged tables and the streams, rebuilt whole after every load: prices, nodes, devices, pods,
-- pod states, health, topology, processes and pending demand as staging.sql's *_def views define them
-- (materialised: every analysis reads them, several times, and a view is planned and computed again in
-- each), in dependency order; then one row per stream (prices, teams, allocations and series steps as
-- they are now).
CREATE OR REPLACE TABLE stg_prices AS SELECT * FROM stg_prices_def;

CREATE OR REPLACE TABLE stg_nodes AS SELECT * FROM stg_nodes_def;

CREATE OR REPLACE TABLE stg_devices AS SELECT * FROM stg_devices_def;

CREATE OR REPLACE TABLE stg_mig_targets AS SELECT * FROM stg_mig_targets_def;

CREATE OR REPLACE TABLE stg_gpus AS SELECT * FROM stg_gpus_def;

CREATE OR REPLACE TABLE stg_pods AS SELECT * FROM stg_pods_def;

CREATE OR REPLACE TABLE stg_pod_status AS SELECT * FROM stg_pod_status_def;

CREATE OR REPLACE TABLE stg_health AS SELECT * FROM stg_health_def;

CREATE OR REPLACE TABLE stg_topology AS SELECT * FROM stg_topology_def;

CREATE OR REPLACE TABLE stg_processes AS SELECT * FROM stg_processes_def;

CREATE OR REPLACE TABLE stg_scheduler_pending AS SELECT * FROM stg_scheduler_pending_def;

CREATE OR REPLACE TABLE stg_streams AS SELECT * FROM stg_streams_for();
