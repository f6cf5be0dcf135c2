"""`gpuwatch doctor`: readiness of a Prometheus (or a store) for every finding (doctor/command.py)."""
