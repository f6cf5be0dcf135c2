"""kubelet pod-resources v1 API: ``api.proto`` plus stubs generated at build time (hatch_build.py).

``api_pb2`` / ``api_pb2_grpc`` exist after ``pip install -e .`` or in a built wheel; they are not
committed. Import them through :mod:`gpuwatch.sources.kubelet`, which says how to fix a missing one.
"""
