"""gpuwatch.sources.cgroup_pods: host PID -> pod UID (and container id) from /proc/<pid>/cgroup.

The cgroup files below are written in the shapes the kubelet and the runtimes produce; where each
comes from is said next to it: the kubelet's cgroup names (pkg/kubelet/cm: ``kubepods`` / QoS /
``pod<uid>``, systemd driver escaping "-" as "_" and expanding ``a-b-c.slice`` into its parents; the
"Configuring a cgroup driver" and "Pod QoS" docs), the runtimes' container scopes (kubelet's
SystemdPathPrefixOfRuntime: containerd ``cri-containerd-``, CRI-O ``crio-``; Docker ``docker-``), and
proc(5)'s ``hierarchy-ID:controller-list:cgroup-path`` line format (v1 one line per hierarchy, v2
``0::``). The I/O half runs against real files: a temporary proc root, and this machine's /proc.
Also: a host process is None (no pod), an unreadable PID is Unknown (not "no pod"), and NVML compute
processes (through the fake pynvml at the NVML boundary) join to their pods.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys

import pytest

from gpuwatch.sources import nvml
from gpuwatch.sources.cgroup_pods import (
    GpuProcess,
    PodRef,
    Unknown,
    join_processes,
    parse_cgroup,
    read_cgroup,
    resolve_pid,
)
from gpuwatch.units import MIB
from tests.conftest import FIXTURES
from tests.fakes.fake_pynvml import FakeNvml

UID = "6d3a7e3c-0b7e-4d8f-9a3e-2f1c5b6a7d80"
SYSTEMD_UID = UID.replace("-", "_")  # the kubelet's systemd driver escapes "-" (systemd's nesting mark)
STATIC_UID = "0f4b6c1e2d3a4b5c6d7e8f9a0b1c2d3e"  # a static pod: hex of a hash of its manifest, no dashes
CID = "3f1c0a9b8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170f6e5d4c"  # 64 hex, as the runtimes name them

# cgroup v1 node, kubelet --cgroup-driver=cgroupfs, containerd: every hierarchy names the container's
# cgroup (a bare id under /kubepods/<qos>/pod<uid>); the last line is the empty v2 hierarchy of a
# hybrid host.
V1_CGROUPFS_CONTAINERD = "\n".join([
    f"12:hugetlb:/kubepods/burstable/pod{UID}/{CID}",
    f"11:memory:/kubepods/burstable/pod{UID}/{CID}",
    f"10:devices:/kubepods/burstable/pod{UID}/{CID}",
    f"9:pids:/kubepods/burstable/pod{UID}/{CID}",
    f"4:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}",
    f"3:net_cls,net_prio:/kubepods/burstable/pod{UID}/{CID}",
    f"1:name=systemd:/kubepods/burstable/pod{UID}/{CID}",
    "0::/",
]) + "\n"

SHAPES = {
    # v2, systemd driver, containerd (SystemdCgroup = true), Burstable pod
    "v2 systemd containerd burstable": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/"
        f"cri-containerd-{CID}.scope\n", PodRef(UID, CID)),
    # v2, systemd driver, CRI-O, BestEffort pod
    "v2 systemd cri-o besteffort": (
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice/crio-{CID}.scope\n",
        PodRef(UID, CID)),
    # v2, systemd driver, Guaranteed pod (no QoS slice), Docker via cri-dockerd
    "v2 systemd docker guaranteed": (
        f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/docker-{CID}.scope\n", PodRef(UID, CID)),
    # v1, systemd driver, Docker: one line per hierarchy, all naming the same scope
    "v1 systemd docker": ("\n".join(
        f"{n}:{c}:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/docker-{CID}.scope"
        for n, c in ((11, "memory"), (7, "devices"), (3, "cpu,cpuacct"), (1, "name=systemd"))) + "\n",
        PodRef(UID, CID)),
    "v1 cgroupfs containerd burstable": (V1_CGROUPFS_CONTAINERD, PodRef(UID, CID)),
    # v2, cgroupfs driver, CRI-O (its cgroupfs manager prefixes the id), BestEffort pod
    "v2 cgroupfs cri-o besteffort": (f"0::/kubepods/besteffort/pod{UID}/crio-{CID}\n", PodRef(UID, CID)),
    # v2, cgroupfs driver, containerd, Guaranteed pod: straight under /kubepods
    "v2 cgroupfs containerd guaranteed": (f"0::/kubepods/pod{UID}/{CID}\n", PodRef(UID, CID)),
    # a static pod (kubelet manifest): its UID is 32 hex digits
    "v2 systemd static pod": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_UID}.slice/"
        f"cri-containerd-{CID}.scope\n", PodRef(STATIC_UID, CID)),
    # kind: the node's kubelet runs with --cgroup-root=/kubelet, so every name gains a "kubelet-" parent
    "v2 systemd kind cgroup-root": (
        f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n", PodRef(UID, CID)),
    # read from inside the exporter's own cgroup namespace (v2 default for containers): paths outside
    # it are relative to the exporter's cgroup, climbing out with ".."
    "v2 systemd seen from a cgroup namespace": (
        f"0::/../../kubepods-besteffort-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n", PodRef(UID, CID)),
    "v2 cgroupfs seen from a cgroup namespace": (f"0::/../../../besteffort/pod{UID}/{CID}\n", PodRef(UID, CID)),
    # CRI-O's conmon runs in the pod's slice but is not the container: the pod, no container
    "v2 systemd cri-o conmon": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/"
        f"crio-conmon-{CID}.scope\n", PodRef(UID, None)),
}

HOST = {
    # systemd services and sessions on the host (v2): no pod
    "containerd service": "0::/system.slice/containerd.service\n",
    "kubelet service": "0::/system.slice/kubelet.service\n",
    "ssh session": "0::/user.slice/user-1000.slice/session-3.scope\n",
    "init": "0::/init.scope\n",
    # containers that are not pods: plain Docker on systemd, Podman (its pods are libpod_pod_<id> slices)
    "docker run": f"0::/system.slice/docker-{CID}.scope\n",
    "podman pod": f"0::/machine.slice/machine-libpod_pod_{CID}.slice/libpod-{CID}.scope\n",
    # the kubelet's own parent cgroups hold no pod
    "kubepods slice itself": "0::/kubepods.slice/kubepods-burstable.slice\n",
    # v1 host process: every hierarchy at a service
    "v1 sshd": "11:memory:/system.slice/ssh.service\n1:name=systemd:/system.slice/ssh.service\n0::/\n",
    # a "pod<hex>" cgroup that is not the kubelet's (not below kubepods): not a pod
    "stray pod-named cgroup": f"0::/system.slice/pod{UID}/{CID}\n",
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_each_driver_and_runtime_shape_names_the_pod_and_container(name):
    text, expected = SHAPES[name]
    assert parse_cgroup(text) == expected


@pytest.mark.parametrize("name", list(HOST))
def test_host_processes_are_in_no_pod(name):
    assert parse_cgroup(HOST[name]) is None


def test_garbage_lines_are_skipped_not_fatal():
    text = "not a cgroup line\n\n" + SHAPES["v2 systemd containerd burstable"][0]
    assert parse_cgroup(text) == PodRef(UID, CID)
    assert parse_cgroup("no colons here\n") is None


def test_a_uid_of_the_wrong_shape_is_not_a_pod():
    assert parse_cgroup(f"0::/kubepods/burstable/pod{UID[:-1]}x/{CID}\n") is None  # not hex
    assert parse_cgroup(f"0::/kubepods/burstable/pod{UID[:30]}/{CID}\n") is None  # too short


def write_proc(root, pid: int, text: str) -> None:
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / str(pid) / "cgroup").write_text(text)


def test_resolve_reads_the_configured_proc_root(tmp_path):
    write_proc(tmp_path, 4242, SHAPES["v2 systemd containerd burstable"][0])
    write_proc(tmp_path, 1, HOST["init"])
    assert resolve_pid(4242, proc_root=str(tmp_path)) == PodRef(UID, CID)
    assert resolve_pid(1, proc_root=str(tmp_path)) is None, "host process: no pod"


def test_an_exited_process_is_unknown_not_host(tmp_path):
    found = resolve_pid(99999, proc_root=str(tmp_path))
    assert found == Unknown("process exited")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file: no permission error to see")
def test_an_unreadable_cgroup_file_is_unknown(tmp_path):
    write_proc(tmp_path, 7, SHAPES["v2 systemd containerd burstable"][0])
    (tmp_path / "7" / "cgroup").chmod(0)
    assert resolve_pid(7, proc_root=str(tmp_path)) == Unknown("permission denied")


def test_other_read_failures_and_empty_files_are_unknown(tmp_path):
    (tmp_path / "8" / "cgroup").mkdir(parents=True)  # EISDIR: any OSError is unknown, never "no pod"
    assert isinstance(resolve_pid(8, proc_root=str(tmp_path)), Unknown)
    write_proc(tmp_path, 9, "")  # a zombie's cgroup file can read empty
    assert resolve_pid(9, proc_root=str(tmp_path)) == Unknown("empty cgroup file")
    assert isinstance(read_cgroup(0, proc_root=str(tmp_path)), Unknown)


def test_real_proc_this_process_is_readable_and_a_reaped_one_is_unknown():
    here = resolve_pid(os.getpid())
    assert not isinstance(here, Unknown), here  # this machine's /proc answers for a live process
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    gone = int(child.stdout)
    if os.path.exists(f"/proc/{gone}"):  # the PID was reused in between: nothing to assert about it
        pytest.skip("PID reused")
    assert resolve_pid(gone) == Unknown("process exited")


def test_join_marks_pod_host_and_unknown_and_resolves_each_pid_once(tmp_path):
    write_proc(tmp_path, 100, SHAPES["v2 systemd cri-o besteffort"][0])
    write_proc(tmp_path, 200, HOST["ssh session"])
    calls = []

    def resolve(pid):
        calls.append(pid)
        return resolve_pid(pid, proc_root=str(tmp_path))

    procs = [{"pid": 100, "used_memory": 512 * MIB, "gpu_instance_id": None, "compute_instance_id": None},
             {"pid": 200, "used_memory": 64 * MIB, "gpu_instance_id": None, "compute_instance_id": None},
             {"pid": 300, "used_memory": None, "gpu_instance_id": None, "compute_instance_id": None},
             {"pid": 100, "used_memory": 256 * MIB, "gpu_instance_id": None, "compute_instance_id": None}]
    joined = join_processes(procs, resolve)
    assert sorted(calls) == [100, 200, 300]
    assert [(g.pid, g.owner, g.pod_uid, g.container_id) for g in joined] == [
        (100, "pod", UID, CID), (200, "host", None, None), (300, "unknown", None, None), (100, "pod", UID, CID)]
    assert joined[2].reason == "process exited" and joined[2].used_memory_bytes is None
    assert sum(g.used_memory_bytes or 0 for g in joined if g.owner == "pod") == 768 * MIB


def test_nvml_mig_processes_join_to_their_pods_through_the_fake_pynvml(tmp_path):
    """End to end at the NVML boundary: the real H100 MIG capture's load phase (GI 2 / CI 0, pids
    21180, 21181, 21198) read through the fake pynvml, then joined through a proc root."""
    data = json.loads((FIXTURES / "nvml" / "h100-mig.json").read_text())
    data["gpus"][0]["processes"] = [{"pid": 21180, "used_memory": 2296 * MIB, "gi_id": 2, "ci_id": 0},
                                    {"pid": 21181, "used_memory": 1272 * MIB, "gi_id": 2, "ci_id": 0},
                                    {"pid": 21198, "used_memory": 7484 * MIB, "gi_id": 2, "ci_id": 0}]
    fake = FakeNvml(copy.deepcopy(data))
    write_proc(tmp_path, 21180, SHAPES["v2 systemd containerd burstable"][0])
    write_proc(tmp_path, 21181, SHAPES["v2 systemd containerd burstable"][0])
    write_proc(tmp_path, 21198, HOST["ssh session"])  # run by hand on the node: memory no pod accounts for
    raw = nvml.read(fake, nvml.ReadState())
    joined = join_processes(raw["gpus"][0]["processes"], functools.partial(resolve_pid, proc_root=str(tmp_path)))
    assert joined == (
        GpuProcess(21180, 2296 * MIB, 2, 0, "pod", UID, CID), GpuProcess(21181, 1272 * MIB, 2, 0, "pod", UID, CID),
        GpuProcess(21198, 7484 * MIB, 2, 0, "host"))
