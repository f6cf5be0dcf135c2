"""Build hook: generate the kubelet pod-resources gRPC stubs from api.proto at build time.

Runs for every wheel build, editable (``pip install -e .``) included. The stubs are generated
into ``gpuwatch/sources/_podresources/`` (gitignored), with the repository root as protoc's
``-I`` root so the generated ``api_pb2_grpc.py`` imports ``gpuwatch.sources._podresources.api_pb2``
by its full package name rather than a bare ``api_pb2`` that only works from that directory.
"""

from __future__ import annotations

from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PROTO = "gpuwatch/sources/_podresources/api.proto"
GENERATED = ("api_pb2.py", "api_pb2_grpc.py")


class PodResourcesStubsHook(BuildHookInterface):
    """hatchling ``custom`` hook (see ``[tool.hatch.build.hooks.custom]`` in pyproject.toml)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":  # the sdist ships api.proto; its wheel build regenerates
            return
        generate(Path(self.root).resolve())
        if version != "editable":
            # Gitignored files are left out of wheels unless declared artifacts. An editable
            # install imports them from the source tree, where they were just written.
            build_data["artifacts"].extend(f"/{_out_dir()}/{name}" for name in GENERATED)

    def clean(self, versions: list[str]) -> None:
        for name in GENERATED:
            (Path(self.root).resolve() / _out_dir() / name).unlink(missing_ok=True)


def generate(root: Path) -> list[Path]:
    """Run grpc_tools.protoc on api.proto; returns the generated files. Raises on failure."""
    from grpc_tools import protoc  # build-time only: [build-system] requires grpcio-tools

    args = ["grpc_tools.protoc", f"-I{root}", f"--python_out={root}",
            f"--grpc_python_out={root}", str(root / PROTO)]
    if protoc.main(args) != 0:
        raise RuntimeError(f"grpc_tools.protoc failed on {root / PROTO} (see its message above)")
    outputs = [root / _out_dir() / name for name in GENERATED]
    missing = [str(p) for p in outputs if not p.exists()]
    if missing:
        raise RuntimeError(f"grpc_tools.protoc did not write {', '.join(missing)}")
    return outputs


def _out_dir() -> str:
    return PROTO.rsplit("/", 1)[0]
