"""The two images, checked without a container engine (none runs here).

Dockerfile builds the node exporter's image, Dockerfile.gpuwatch everything else the chart runs
(analyzer, app, report, export-derived, reclaim, lake). What is checked:

1. `make image` builds, under the names and tag the chart's default values pull, exactly the
   images the rendered chart's containers use (the oauth2-proxy sidecar aside).
2. Each Dockerfile's build context is enough: the files its COPY lines take (honouring
   .dockerignore) build the wheel its `pip install` builds (hatchling and the stub hook, no
   isolation), and that wheel installs the `gpuwatch` entry point and the extras asked for.
3. Dockerfile.gpuwatch installs what the chart's commands import: from each command's module
   (and the app's pages, and the chart's scripts), every import, lazy ones inside functions
   included, is followed through the package; each third-party module found must come from a
   distribution in the closure of `gpuwatch[<the image's extras>]` (requirements and markers as
   the installed metadata declares them), or from the standard library.
4. Its user is the chart's pod uid, and `python` and `gpuwatch` are on PATH.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.helm_chart import CHART, all_on_values, pod_spec, render

requirements = pytest.importorskip("packaging.requirements")
DOCKERFILES = {"exporter": ROOT / "Dockerfile", "gpuwatch": ROOT / "Dockerfile.gpuwatch"}
WORKLOADS = ("DaemonSet", "Deployment", "Job", "CronJob")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in path.read_text().splitlines()
                                          if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
            for line in text.splitlines() if line.strip()]


def last_stage(path: Path) -> list[tuple[str, str]]:
    steps = instructions(path)
    start = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[start:]


def pip_extras(path: Path) -> set[str]:
    """The extras the image's `pip install "/src[...]"` asks for."""
    [install] = [rest for op, rest in instructions(path) if op == "RUN" and "pip install" in rest]
    return set(re.search(r'/src\[([^\]]+)\]', install)[1].split(","))


def chart_images() -> dict[str, set[str]]:
    """image -> the components whose gpuwatch containers run it (all-on values, gpuwatch exporter)."""
    images: dict[str, set[str]] = {}
    for doc in render(all_on_values()):
        if doc.kind not in WORKLOADS:
            continue
        spec = pod_spec(doc.obj)
        for c in spec.get("initContainers", []) + spec["containers"]:
            if c["name"] != "oauth2-proxy":
                images.setdefault(c["image"], set()).add(doc.component)
    return images


def chart_commands() -> set[tuple[str, ...]]:
    """What the gpuwatch image's containers run: ("gpuwatch", subcommand) or ("python", script)."""
    out = set()
    for doc in render(all_on_values()):
        if doc.kind not in WORKLOADS or doc.component == "exporter":
            continue
        spec = pod_spec(doc.obj)
        for c in spec.get("initContainers", []) + spec["containers"]:
            if c["name"] == "oauth2-proxy":
                continue
            command = c["command"] + c.get("args", [])
            if command[:2] == ["python", "-c"]:
                out.add(("python -c", command[2]))  # inline code: its imports are followed too
            else:
                out.add(("python", command[1]) if command[0] == "python" else ("gpuwatch", command[1]))
    return out


# --- 1. make image = what the chart pulls ------------------------------------------------------

def test_make_image_builds_the_images_the_chart_pulls():
    make = shutil.which("make") or pytest.skip("make is not installed")
    dry = subprocess.run([make, "-n", "image"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    built = {m[2]: Path(m[1]).name for m in re.finditer(r"build -f (\S+) -t (\S+) \.", dry)}
    version = __import__("gpuwatch").__version__
    assert built == {f"ghcr.io/gpuwatch/gpuwatch-exporter:{version}": "Dockerfile",
                     f"ghcr.io/gpuwatch/gpuwatch:{version}": "Dockerfile.gpuwatch"}
    images = chart_images()
    assert set(images) == set(built), images
    by_file = {name: {c for image, cs in images.items() if built[image] == name for c in cs} for name in built.values()}
    assert by_file["Dockerfile"] == {"exporter"}
    assert by_file["Dockerfile.gpuwatch"] == {"analyzer", "app", "report", "derived", "reclaim", "lake"}


# --- 2. the build context builds the wheel ------------------------------------------------------

def dockerignored(name: str) -> bool:
    """.dockerignore here is an allow-list: '*', then '!path' for what the images may copy."""
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*", "the .dockerignore this test reads starts by excluding everything"
    return f"!{name}" not in lines


def build_context(path: Path, into: Path) -> Path:
    """Copy what the Dockerfile's COPY lines take from the context to where they put it."""
    for op, rest in instructions(path):
        if op != "COPY" or rest.startswith("--from"):
            continue
        *sources, dest = rest.split()
        for source in sources:
            assert not dockerignored(source), f"{path.name}: COPY {source} is excluded by .dockerignore"
            target = into / dest.lstrip("/") / (Path(source).name if dest.endswith("/") else "")
            target.parent.mkdir(parents=True, exist_ok=True)
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__", "*_pb2*.py"))
            else:
                shutil.copy2(ROOT / source, target)
    return into / "src"


def test_the_build_context_leaves_out_the_virtualenv_and_data():
    for name in (".venv", ".git", "tests", "sample_data", "bench", ".demo"):
        assert dockerignored(name), name


@pytest.mark.slow
@pytest.mark.parametrize("image", DOCKERFILES)
def test_the_build_context_builds_the_wheel_with_the_entry_point_and_extras(image, tmp_path):
    # before: Dockerfile copied gpuwatch/ but not app/, which the wheel force-includes: no build
    src = build_context(DOCKERFILES[image], tmp_path / "context")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, timeout=240)
    (wheel,) = (tmp_path / "dist").glob("gpuwatch-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert re.search(r"^gpuwatch = gpuwatch\.cli:main$", entry, re.M)
    assert "gpuwatch/_app/streamlit_app.py" in names
    assert pip_extras(DOCKERFILES[image]) <= set(re.findall(r"^Provides-Extra: (\S+)$", meta, re.M))


# --- 3. the gpuwatch image installs what the chart's commands import ------------------------------

def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(extras: set[str]) -> set[str]:
    """Distributions `pip install gpuwatch[extras]` installs, from the installed metadata."""
    seen: set[tuple[str, frozenset]] = set()
    todo = [("gpuwatch", frozenset(extras))]
    while todo:
        name, wanted = todo.pop()
        if (canonical(name), wanted) in seen:
            continue
        seen.add((canonical(name), wanted))
        for line in md.requires(name) or []:
            req = requirements.Requirement(line)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (wanted or {""})):
                continue
            todo.append((req.name, frozenset(req.extras)))
    return {name for name, _ in seen}


def module_file(name: str) -> Path | None:
    """The source file of a first-party module (gpuwatch.* here, or an app/ page module)."""
    parts = name.split(".")
    # the app's pages import their siblings by bare name (Streamlit puts app/ on sys.path)
    for base in (ROOT.joinpath(*parts), ROOT.joinpath("app", *parts)):
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def imports_of(path: Path | str) -> set[str]:
    """Every module an import statement in ``path`` (or inline code) names, lazy ones included."""
    if isinstance(path, str):
        tree, package = ast.parse(path), ""
    else:
        tree = ast.parse(path.read_text(), filename=str(path))
        package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names if module_file(f"{base}.{alias.name}")}
    return found


def third_party_imports(roots: list[Path | str]) -> dict[str, str]:
    """Third-party top-level module -> the first-party file that imports it, over the import graph."""
    todo, seen, outside = list(roots), set(), {}
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in imports_of(path):
            top = name.split(".")[0]
            if top in ("gpuwatch", "app") or module_file(name):
                parts = name.split(".")
                for i in range(1, len(parts) + 1):  # a module's packages are imported first
                    if (file := module_file(".".join(parts[:i]))) is not None:
                        todo.append(file)
            elif top and top not in sys.stdlib_module_names and top != "__future__":
                outside.setdefault(top, "inline code" if isinstance(path, str) else str(path.relative_to(ROOT)))
    return outside


def command_roots() -> list[Path | str]:
    cli = pytest.importorskip("gpuwatch.cli")
    roots = [ROOT / "gpuwatch/cli.py"]
    for runner, what in chart_commands():
        if runner == "python -c":
            roots.append(what)
        elif runner == "python":
            roots.append(CHART / what.removeprefix("/"))
        else:
            roots.append(module_file(cli.COMMANDS[what][0]))
            if what == "app":  # `gpuwatch app` runs Streamlit on the pages
                roots += sorted((ROOT / "app").rglob("*.py"))
    return roots


def test_the_chart_runs_the_commands_this_test_follows():
    commands = chart_commands()
    assert {what for runner, what in commands if runner != "python -c"} == {
        "app", "report", "export-derived", "reclaim", "lake", "/scripts/analyzer.py", "/scripts/report_webhook.py"}
    assert any(runner == "python -c" for runner, _ in commands)  # the app's wait-for-db


def test_the_gpuwatch_image_installs_everything_the_charts_commands_import():
    installed = {canonical(d) for d in closure(pip_extras(DOCKERFILES["gpuwatch"]))}
    providers = md.packages_distributions()
    missing = {}
    for module, where in third_party_imports(command_roots()).items():
        dists = {canonical(d) for d in providers.get(module, [])}
        if not dists & installed:
            missing[module] = (where, sorted(dists) or "no installed distribution")
    assert not missing, f"imported by the chart's commands but not installed in the image: {json.dumps(missing)}"
    # the analyzer's script runs `gpuwatch ingest` and `gpuwatch analyze` as subprocesses
    script = (CHART / "scripts/analyzer.py").read_text()
    for command in ("ingest", "analyze"):
        assert f'"{command}"' in script


def test_the_check_would_catch_a_missing_extra():
    # the exporter's extras alone do not carry the app, report or reclaim imports
    installed = {canonical(d) for d in closure(pip_extras(DOCKERFILES["exporter"]))}
    providers = md.packages_distributions()
    lacking = {m for m in third_party_imports(command_roots())
               if not {canonical(d) for d in providers.get(m, [])} & installed}
    assert {"duckdb", "streamlit", "kubernetes"} <= lacking


# --- 4. user and PATH ---------------------------------------------------------------------------

def test_user_path_and_entrypoint_fit_the_chart():
    final = last_stage(DOCKERFILES["gpuwatch"])
    users = [rest for op, rest in final if op == "USER"]
    app = next(d.obj for d in render() if d.kind == "Deployment" and d.component == "app")
    assert users[-1] == str(pod_spec(app)["securityContext"]["runAsUser"])
    env = " ".join(rest for op, rest in final if op == "ENV")
    assert re.search(r"PATH=/opt/gpuwatch/bin:\$PATH", env)  # gpuwatch and the venv's python
    assert json.loads(next(rest for op, rest in final if op == "ENTRYPOINT")) == ["gpuwatch"]
