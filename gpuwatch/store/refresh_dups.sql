-- Could a node range hold the same (ts, device, pod) twice? Compares row count with distinct key
-- hashes: a hash collision only answers "yes" (the exact merge then runs), never a wrong "no".
SELECT count(*) > count(DISTINCT hash(ts, node, gpu_uuid, mig_gi_id, nullif(trim(namespace), ''), nullif(trim(pod), '')))
FROM samples
WHERE node >= $node_lo AND node <= $node_hi;
