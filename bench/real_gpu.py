"""Takes the real-GPU captures of tests/fixtures/real/ on a machine with an NVIDIA GPU (read-only).

    python bench/real_gpu.py capture OUT [--seconds 25]
    python bench/real_gpu.py share OUT [--seconds 20]     # two processes sharing the GPU (PAIRS)

What it does, in order, each part on its own (a failing part is written down and the rest goes on):

1. ``commands``: ``nvidia-smi -q``, ``-q -x``, ``topo -m``, ``mig -lgip``/``-lgipp``, ``nvlink -s``,
   the query-gpu CSV, and the Python/PyTorch/CuPy versions -> ``OUT/cmd/*.txt``.
2. ``facts``: what NVML answers about the GPU itself — MIG mode, every GPU-instance profile with its
   id, slices, memory and possible placements, NVLink link states and far ends, common ancestor and
   P2P status (with itself where there is one GPU), NUMA node, CPU/memory affinity, fabric info, GPM
   support, versions -> ``OUT/facts.json``; gpuwatch's own topology read -> ``OUT/topology_raw.json``.
3. ``loads``: four loads of ``--seconds`` each (idle; a bf16 matmul loop; a device-to-device memory
   copy loop; a single-block spin kernel) while ``gpuwatch export --source nvml`` runs twice (with
   GPM and with ``--no-profiling``), both scraped every second. This process reads NVML itself every
   second through ``gpuwatch.sources.nvml.read`` -> ``OUT/raw.jsonl`` (the raw payloads, each with its
   load and read time), ``OUT/scrapes-gpm.jsonl``, ``OUT/scrapes-nogpm.jsonl``, and every pynvml call
   gpuwatch made with its outcome -> ``OUT/calls.json``. The exporters' CPU seconds and RSS over 60 s
   -> ``OUT/overhead.json``.
4. ``pytest -m gpu`` on the nvml, MIG and topology tests when pytest imports -> ``OUT/pytest.txt``.

Nothing here changes GPU state: no MIG, clock, power-limit, persistence or reset calls.
The load worker (``python bench/real_gpu.py load NAME SECONDS``) uses PyTorch, and CuPy for the
spin kernel when it imports (else ``torch.cuda._sleep``, PyTorch's single-thread spin kernel).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LOADS = ("idle", "matmul", "memcopy", "spin")
COMMANDS = {
    "nvidia-smi-q": ["nvidia-smi", "-q"],
    "nvidia-smi-q-x": ["nvidia-smi", "-q", "-x"],
    "nvidia-smi-topo-m": ["nvidia-smi", "topo", "-m"],
    "nvidia-smi-mig-lgip": ["nvidia-smi", "mig", "-lgip"],
    "nvidia-smi-mig-lgipp": ["nvidia-smi", "mig", "-lgipp"],
    "nvidia-smi-nvlink-s": ["nvidia-smi", "nvlink", "-s"],
    "nvidia-smi-L": ["nvidia-smi", "-L"],
    "nvidia-smi-query": ["nvidia-smi", "--format=csv", "--query-gpu=name,uuid,pci.bus_id,driver_version,"
                         "mig.mode.current,ecc.mode.current,persistence_mode,power.limit,clocks.max.sm,"
                         "memory.total,compute_cap"],
    "uname": ["uname", "-a"],
    "versions": [sys.executable, "-c", "import sys, platform; print(sys.version); print(platform.platform());"
                 "import torch; print('torch', torch.__version__, torch.version.cuda);"
                 "p = torch.cuda.get_device_properties(0); print('sm_count', p.multi_processor_count);"
                 "import cupy; print('cupy', cupy.__version__)"],
}


# --- 1. commands --------------------------------------------------------------------------------

def commands(out: Path) -> None:
    (out / "cmd").mkdir(parents=True, exist_ok=True)
    for name, argv in COMMANDS.items():
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            text = done.stdout + (f"\n[stderr]\n{done.stderr}" if done.stderr else "") + f"\n[rc {done.returncode}]\n"
        except Exception as exc:
            text = f"[failed: {type(exc).__name__}: {exc}]\n"
        (out / "cmd" / f"{name}.txt").write_text(text)


# --- 2. facts -----------------------------------------------------------------------------------

def outcome(nvml, fn, *args, convert=lambda v: v) -> dict:
    """{"value": ...} or {"error": NVML error name}: what NVML answered, never a guess."""
    try:
        return {"value": convert(fn(*args))}
    except nvml.NVMLError as exc:
        return {"error": error_name(nvml, exc)}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def error_name(nvml, exc) -> str:
    code = getattr(exc, "value", None)
    names = [n for n in dir(nvml) if n.startswith("NVML_ERROR_") and getattr(nvml, n) == code]
    return names[0] if names else f"NVML error {code}"


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def struct(value) -> dict:
    return {name: text(getattr(value, name)) if not isinstance(getattr(value, name), ctypes.Structure)
            else struct(getattr(value, name)) for name, *_ in value._fields_}


def facts(nvml) -> dict:
    gpus = []
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    for index, h in enumerate(handles):
        gpus.append({"index": index, **gpu_facts(nvml, h), "pairs": [
            {"peer": j, "common_ancestor": outcome(nvml, nvml.nvmlDeviceGetTopologyCommonAncestor, h, other),
             "p2p_nvlink": outcome(nvml, nvml.nvmlDeviceGetP2PStatus, h, other, nvml.NVML_P2P_CAPS_INDEX_NVLINK),
             "p2p_read": outcome(nvml, nvml.nvmlDeviceGetP2PStatus, h, other, nvml.NVML_P2P_CAPS_INDEX_READ)}
            for j, other in enumerate(handles)]})
    return {"driver_version": outcome(nvml, nvml.nvmlSystemGetDriverVersion, convert=text),
            "cuda_driver_version": outcome(nvml, nvml.nvmlSystemGetCudaDriverVersion_v2),
            "nvml_version": outcome(nvml, nvml.nvmlSystemGetNVMLVersion, convert=text),
            "binding": getattr(nvml, "__version__", None) or _binding_version(), "gpus": gpus}


def _binding_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("nvidia-ml-py")
    except Exception:
        return None


def gpu_facts(nvml, h) -> dict:
    f = {"name": outcome(nvml, nvml.nvmlDeviceGetName, h, convert=text),
         "uuid": outcome(nvml, nvml.nvmlDeviceGetUUID, h, convert=text),
         "pci": outcome(nvml, nvml.nvmlDeviceGetPciInfo, h, convert=lambda p: text(p.busId)),
         "architecture": outcome(nvml, nvml.nvmlDeviceGetArchitecture, h),
         "compute_capability": outcome(nvml, nvml.nvmlDeviceGetCudaComputeCapability, h, convert=list),
         "attributes": outcome(nvml, nvml.nvmlDeviceGetAttributes, h, convert=struct),
         "num_gpu_cores": outcome(nvml, nvml.nvmlDeviceGetNumGpuCores, h),
         "memory_bus_width": outcome(nvml, nvml.nvmlDeviceGetMemoryBusWidth, h),
         "memory_v2": outcome(nvml, nvml.nvmlDeviceGetMemoryInfo, h, nvml.nvmlMemory_v2, convert=struct),
         "ecc_mode": outcome(nvml, nvml.nvmlDeviceGetEccMode, h, convert=list),
         "persistence_mode": outcome(nvml, nvml.nvmlDeviceGetPersistenceMode, h),
         "power_limit_mw": outcome(nvml, nvml.nvmlDeviceGetPowerManagementLimit, h),
         "max_sm_clock_mhz": outcome(nvml, nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM),
         "pcie_gen": outcome(nvml, nvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
         "pcie_width": outcome(nvml, nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
         "virtualization_mode": outcome(nvml, nvml.nvmlDeviceGetVirtualizationMode, h),
         "vbios": outcome(nvml, nvml.nvmlDeviceGetVbiosVersion, h, convert=text),
         "numa_node_id": outcome(nvml, nvml.nvmlDeviceGetNumaNodeId, h),
         "memory_affinity": outcome(nvml, nvml.nvmlDeviceGetMemoryAffinity, h, 4, 0, convert=lambda w: [int(x) for x in w]),
         "cpu_affinity": outcome(nvml, nvml.nvmlDeviceGetCpuAffinity, h, 64, convert=lambda w: [int(x) for x in w]),
         "gpm_support": outcome(nvml, nvml.nvmlGpmQueryDeviceSupport, h, convert=lambda s: int(s.isSupportedDevice)),
         "mig_mode": outcome(nvml, nvml.nvmlDeviceGetMigMode, h, convert=list),
         "max_mig_devices": outcome(nvml, nvml.nvmlDeviceGetMaxMigDeviceCount, h),
         "fabric": fabric(nvml, h), "nvlinks": nvlinks(nvml, h), "mig_profiles": mig_profiles(nvml, h)}
    return f


def fabric(nvml, h) -> dict:
    out = {}
    for call, name in (("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
                       ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t")):
        if hasattr(nvml, call) and hasattr(nvml, name):
            info = getattr(nvml, name)()
            got = outcome(nvml, getattr(nvml, call), h, ctypes.byref(info))
            out[call] = got if "error" in got else {"value": {
                "cluster_uuid": bytes(info.clusterUuid).hex(), "clique_id": int(info.cliqueId),
                "state": int(info.state), "status": int(getattr(info, "status", -1))}}
    return out


def nvlinks(nvml, h) -> list[dict]:
    out = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        out.append({"link": link, "state": outcome(nvml, nvml.nvmlDeviceGetNvLinkState, h, link),
                    "version": outcome(nvml, nvml.nvmlDeviceGetNvLinkVersion, h, link),
                    "remote_pci": outcome(nvml, nvml.nvmlDeviceGetNvLinkRemotePciInfo, h, link,
                                          convert=lambda p: text(p.busId)),
                    "remote_type": outcome(nvml, nvml.nvmlDeviceGetNvLinkRemoteDeviceType, h, link)})
    return out


def mig_profiles(nvml, h) -> list[dict]:
    """Every GPU-instance profile NVML knows (NVML_GPU_INSTANCE_PROFILE_*): its info and possible
    placements. Read-only queries; they answer whether or not MIG mode is on (or say why not)."""
    out = []
    for profile in range(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 18)):
        info = outcome(nvml, nvml.nvmlDeviceGetGpuInstanceProfileInfo, h, profile, convert=struct)
        entry = {"profile": profile, "info": info}
        if "value" in info:
            entry["placements"] = placements(nvml, h, info["value"]["id"])
            entry["remaining"] = outcome(nvml, nvml.nvmlDeviceGetGpuInstanceRemainingCapacity, h, info["value"]["id"])
        out.append(entry)
    return out


def placements(nvml, h, profile_id: int) -> dict:
    array = (nvml.c_nvmlGpuInstancePlacement_t * 8)()
    count = ctypes.c_uint(len(array))
    got = outcome(nvml, nvml.nvmlDeviceGetGpuInstancePossiblePlacements, h, profile_id, array, ctypes.byref(count))
    if "error" in got:
        return got
    return {"value": [[array[i].start, array[i].size] for i in range(count.value)]}


# --- 3. loads -----------------------------------------------------------------------------------

class Recorder:
    """A pynvml stand-in that forwards every call and counts its outcomes by name (ok / NVML error)."""

    def __init__(self, nvml):
        self._nvml, self.calls = nvml, {}

    def __getattr__(self, name):
        target = getattr(self._nvml, name)
        if not callable(target) or not name.startswith("nvml") or isinstance(target, type):
            return target

        def call(*args):
            counts = self.calls.setdefault(name, {})
            try:
                value = target(*args)
            except self._nvml.NVMLError as exc:
                key = error_name(self._nvml, exc)
                counts[key] = counts.get(key, 0) + 1
                raise
            counts["ok"] = counts.get("ok", 0) + 1
            return value
        return call


def exporter(port: int, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "gpuwatch", "export", "--source", "nvml", "--kubelet-socket", "",
            "--listen", f"127.0.0.1:{port}", "--interval", "1s", "--node-name", "real-gpu", *extra]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            return reply.read().decode()
    except OSError:
        return None


def proc_usage(pid: int) -> dict:
    """CPU seconds (user + system) and RSS / peak RSS (bytes) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    kib = {k: int(status[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM") if k in status}
    return {"cpu_s": (int(fields[11]) + int(fields[12])) / ticks, "rss": kib.get("VmRSS"), "peak_rss": kib.get("VmHWM")}


def loads(out: Path, seconds: float) -> None:
    import pynvml

    from gpuwatch.sources import nvml as source
    recorder = Recorder(pynvml)
    recorder.nvmlInit()
    state, phase, stop = source.ReadState(), {"load": "start"}, threading.Event()
    servers = {"gpm": (19401, exporter(19401)), "nogpm": (19402, exporter(19402, "--no-profiling"))}
    files = {name: (out / f"scrapes-{name}.jsonl").open("w") for name in servers}
    reads = []

    def every_second():
        with (out / "raw.jsonl").open("w") as raw:
            while not stop.is_set():
                t0 = time.time()
                try:
                    payload = source.read(recorder, state, profiling=True, now=t0)
                    line = {"t": t0, "load": phase["load"], "read_s": time.time() - t0, "raw": payload}
                except Exception as exc:
                    line = {"t": t0, "load": phase["load"], "error": repr(exc)}
                reads.append(line.get("read_s"))
                raw.write(json.dumps(line) + "\n")
                for name, (port, _) in servers.items():
                    body = scrape(port)
                    files[name].write(json.dumps({"t": time.time(), "load": phase["load"], "body": body}) + "\n")
                stop.wait(max(0.0, 1.0 - (time.time() - t0)))

    thread = threading.Thread(target=every_second, daemon=True)
    thread.start()
    time.sleep(5)  # exporters up, GPM's first sample taken
    usage = {"start": {n: proc_usage(p.pid) for n, (_, p) in servers.items()}, "t_start": time.time()}
    phases = []
    for load in LOADS:
        phases.append(run_load(load, seconds, phase))
        if time.time() - usage["t_start"] >= 60 and "end" not in usage:
            usage |= {"end": {n: proc_usage(p.pid) for n, (_, p) in servers.items()}, "t_end": time.time()}
    if "end" not in usage:
        usage |= {"end": {n: proc_usage(p.pid) for n, (_, p) in servers.items()}, "t_end": time.time()}
    phase["load"] = "end"
    time.sleep(2)
    stop.set()
    thread.join(timeout=10)
    for _, process in servers.values():
        process.terminate()
    logs = {n: p.communicate(timeout=20)[1][-4000:] for n, (_, p) in servers.items()}
    for f in files.values():
        f.close()
    timings = sorted(r for r in reads if r is not None)
    (out / "phases.json").write_text(json.dumps(phases, indent=1))
    (out / "calls.json").write_text(json.dumps(dict(sorted(recorder.calls.items())), indent=1))
    (out / "overhead.json").write_text(json.dumps(usage | {"exporter_logs": logs, "own_read_s": {
        "n": len(timings), "median": timings[len(timings) // 2] if timings else None,
        "max": timings[-1] if timings else None}}, indent=1))
    recorder.nvmlShutdown()


def run_load(load: str, seconds: float, phase: dict) -> dict:
    """Start the worker, label reads 'warmup:<load>' until it says ready, then '<load>' until it ends."""
    phase["load"] = f"warmup:{load}"
    t0 = time.time()
    worker = subprocess.Popen([sys.executable, __file__, "load", load, str(seconds)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    ready = worker.stdout.readline().strip()
    t_ready = time.time()
    phase["load"] = load if ready == "ready" else f"failed:{load}"
    rest, err = worker.communicate(timeout=seconds + 120)
    t_end = time.time()
    phase["load"] = f"after:{load}"
    time.sleep(3)  # let the GPU settle so the next load starts from rest
    return {"load": load, "t_start": t0, "t_ready": t_ready, "t_end": t_end, "rc": worker.returncode,
            "worker": (ready + "\n" + rest)[-2000:], "stderr": err[-2000:]}


# --- the load worker ----------------------------------------------------------------------------

SPIN = r"""extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}"""


def work(load: str, seconds: float) -> None:
    if load == "idle":  # no CUDA context at all: what an idle GPU looks like
        print("ready", flush=True)
        time.sleep(seconds)
        return
    import torch
    step = {"matmul": _matmul, "memcopy": _memcopy, "spin": _spin}[load](torch)
    step()  # warm-up: context, allocations, kernels compiled
    torch.cuda.synchronize()
    print("ready", flush=True)
    deadline, n = time.time() + seconds, 0
    while time.time() < deadline:
        step()
        torch.cuda.synchronize()
        n += 1
    print(f"iterations {n}", flush=True)


def _matmul(torch):
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")

    def step():
        for _ in range(20):
            a @ b
    return step


def _memcopy(torch):
    src = torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)

    def step():
        for _ in range(10):
            dst.copy_(src)
    return step


def _spin(torch):
    cycles = int(torch.cuda.get_device_properties(0).clock_rate * 1000 * 0.2)  # kHz -> ~0.2 s of spinning
    try:
        import cupy
        kernel = cupy.RawKernel(SPIN, "spin")
        print(f"spin: cupy {cupy.__version__}, 1 block x 1 thread, {cycles} cycles", file=sys.stderr, flush=True)
        return lambda: kernel((1,), (1,), (cupy.int64(cycles),))
    except Exception as exc:
        print(f"spin: torch.cuda._sleep ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)
        return lambda: torch.cuda._sleep(cycles)


# --- 4. pytest ----------------------------------------------------------------------------------

def gpu_tests(out: Path) -> None:
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-q", "tests/test_source_nvml.py",
            "tests/test_mig_nvml.py", "tests/test_topology_nvml.py"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=180)
    (out / "pytest.txt").write_text(done.stdout[-20000:] + done.stderr[-5000:] + f"\n[rc {done.returncode}]\n")


def capture(out: Path, seconds: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    import pynvml
    parts = [("commands", lambda: commands(out)), ("facts", lambda: _facts(out, pynvml)),
             ("loads", lambda: loads(out, seconds)), ("pytest", lambda: gpu_tests(out))]
    log = {}
    for name, part in parts:
        t0 = time.time()
        try:
            part()
            log[name] = {"ok": True, "s": round(time.time() - t0, 1)}
        except Exception:
            log[name] = {"ok": False, "s": round(time.time() - t0, 1), "error": traceback.format_exc()[-3000:]}
        print(name, json.dumps(log[name])[:600], flush=True)
    (out / "capture-log.json").write_text(json.dumps(log, indent=1))


# Two processes on the one GPU at once (time-slicing, as two pods sharing a GPU would): what NVML's
# per-process utilization says for each, beside the device's.
PAIRS = (("matmul", "matmul"), ("matmul", "spin"), ("memcopy", "spin"))


def share(out: Path, seconds: float) -> None:
    """``OUT/share.jsonl``: one line per second per pair, the raw payload and the workers' PIDs."""
    import pynvml

    from gpuwatch.sources import nvml as source
    out.mkdir(parents=True, exist_ok=True)
    pynvml.nvmlInit()
    try:
        with (out / "share.jsonl").open("w") as f:
            for pair in PAIRS:
                state = source.ReadState()
                workers = [subprocess.Popen([sys.executable, __file__, "load", load, str(seconds)],
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for load in pair]
                ready = [w.stdout.readline().strip() for w in workers]
                deadline = time.time() + seconds
                while time.time() < deadline and all(w.poll() is None for w in workers):
                    t0 = time.time()
                    payload = source.read(pynvml, state, profiling=True, now=t0)
                    f.write(json.dumps({"t": t0, "pair": list(pair), "pids": [w.pid for w in workers],
                                        "ready": ready, "raw": payload}) + "\n")
                    time.sleep(max(0.0, 1.0 - (time.time() - t0)))
                for w in workers:
                    w.communicate(timeout=seconds + 120)
                time.sleep(3)
    finally:
        pynvml.nvmlShutdown()


def _facts(out: Path, pynvml) -> None:
    from gpuwatch.sources import nvml_topology
    pynvml.nvmlInit()
    try:
        (out / "facts.json").write_text(json.dumps(facts(pynvml), indent=1))
        (out / "topology_raw.json").write_text(json.dumps(nvml_topology.read(pynvml), indent=1))
    finally:
        pynvml.nvmlShutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("capture")
    c.add_argument("out", type=Path)
    c.add_argument("--seconds", type=float, default=25.0)
    p = sub.add_parser("share")
    p.add_argument("out", type=Path)
    p.add_argument("--seconds", type=float, default=20.0)
    w = sub.add_parser("load")
    w.add_argument("name", choices=LOADS)
    w.add_argument("seconds", type=float)
    args = parser.parse_args()
    if args.command == "capture":
        capture(args.out, args.seconds)
    elif args.command == "share":
        share(args.out, args.seconds)
    else:
        work(args.name, args.seconds)


if __name__ == "__main__":
    main()
