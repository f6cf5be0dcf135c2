-- A re-stage's working tables, once applied.
DROP TABLE IF EXISTS restage_carried;
DROP TABLE IF EXISTS restage_carried_keys;
DROP TABLE IF EXISTS restage_carried_ts;
DROP TABLE IF EXISTS restage_range_readings;
DROP TABLE IF EXISTS restage_removed;
DROP TABLE IF EXISTS restage_delta;
DROP TABLE IF EXISTS restage_streams;
DROP TABLE IF EXISTS restage_edges;
DROP TABLE IF EXISTS restage_edge_rows;
DROP TABLE IF EXISTS restage_values;
DROP TABLE IF EXISTS restage_rows;
DROP TABLE IF EXISTS restage_dts;
DROP TABLE IF EXISTS restage_neighbours;
