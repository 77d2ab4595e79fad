"""Target: the machine a plan is compiled for (kind, thread count, CPU and its vector ISA, and
for the `cuda` kind the GPU: gpu/devices.py).

`Target.parse("cuda")` takes this host's first CUDA device (gpu/driver.py); `cuda:h100` or
`cuda:sm_80` names a device to build for on a machine without it (issue 54: build here, run
there) — its plan then refuses to load on a host without a device of that capability.

`machine_facts()` names the machine in benchmark results: the CPU's model name and its
family/model numbers with the microarchitecture they identify (an "AMD EPYC" is a Zen 3, 4 or
5 by its family and model alone), every vector extension a kernel could use, the cores.

`default_threads()` (a target's threads unless given) is the cores this process may use: its
CPU affinity, capped by its cgroup's CPU quota (`cgroup_cpus`: v2 `cpu.max`, v1
`cpu.cfs_quota_us`/`cpu.cfs_period_us`, rounded up; the cgroup root a parameter).
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from woodpecker.errors import OptionsError, WoodpeckerError
from woodpecker.gpu import driver
from woodpecker.gpu.devices import GpuDevice, halide_capability, known_device

ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "amx_tile")


def cpu_info() -> tuple[str, list[str]]:
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and ":" in line:
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    return name, [f for f in ISA_FLAGS if f in flags]


# Extensions worth naming in a result beyond the ones a target records (ISA_FLAGS): the
# low-precision and matrix units a session's numbers may depend on.
EXTENSIONS = ISA_FLAGS + ("avx512_bf16", "avx512_fp16", "avx_vnni", "amx_bf16", "amx_int8")

# (vendor, family, first model, last model) -> microarchitecture; family and model in decimal
# as /proc/cpuinfo prints them (AMD's PPR and Intel's SDM model tables; only server parts the
# project's machines were drawn from, and their client siblings of the same family)
_MICROARCHITECTURES = (
    ("AuthenticAMD", 23, 0x00, 0x2F, "Zen/Zen+"), ("AuthenticAMD", 23, 0x30, 0xFF, "Zen 2"),
    ("AuthenticAMD", 25, 0x00, 0x0F, "Zen 3"), ("AuthenticAMD", 25, 0x20, 0x5F, "Zen 3"),
    ("AuthenticAMD", 25, 0x10, 0x1F, "Zen 4"), ("AuthenticAMD", 25, 0x60, 0xAF, "Zen 4"),
    ("AuthenticAMD", 26, 0x00, 0xFF, "Zen 5"),
    ("GenuineIntel", 6, 0x55, 0x55, "Skylake-SP/Cascade Lake"),
    ("GenuineIntel", 6, 0x6A, 0x6C, "Ice Lake-SP"),
    ("GenuineIntel", 6, 0x8F, 0x8F, "Sapphire Rapids"),
    ("GenuineIntel", 6, 0xCF, 0xCF, "Emerald Rapids"),
    ("GenuineIntel", 6, 0xAD, 0xAE, "Granite Rapids"),
)


def microarchitecture(vendor: str, family: int, model: int) -> str:
    """The microarchitecture a CPUID vendor, family and model identify ("" when unknown)."""
    return next((name for v, f, lo, hi, name in _MICROARCHITECTURES
                 if v == vendor and f == family and lo <= model <= hi), "")


@functools.cache
def host_machine() -> str | None:
    """This host's microarchitecture ("Zen 5"), as tuning records carry it; None when the CPU
    is not one `microarchitecture` knows."""
    return machine_facts()["microarchitecture"] or None


def machine_facts(cpuinfo: str | None = None) -> dict:
    """What a benchmark result records of the machine: CPU name, vendor, family, model,
    microarchitecture, the target's ISA, every extension of `EXTENSIONS` the CPU has, the
    cores this process may use, the architecture and Python. `cpuinfo`: the text of
    /proc/cpuinfo (read when not given)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    first: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break                          # the first processor's block is enough
        key, _, value = line.partition(":")
        first.setdefault(key.strip(), value.strip())
    flags = set(first.get("flags", "").split())

    def number(key: str) -> int:
        try:
            return int(first.get(key, ""))
        except ValueError:
            return -1

    vendor, family, model = first.get("vendor_id", ""), number("cpu family"), number("model")
    return {"cpu": first.get("model name") or platform.processor() or platform.machine(),
            "vendor": vendor, "family": family, "model": model,
            "microarchitecture": microarchitecture(vendor, family, model),
            "isa": [f for f in ISA_FLAGS if f in flags],
            "extensions": [f for f in EXTENSIONS if f in flags],
            "cores": default_threads(), "arch": platform.machine(),
            "python": platform.python_version()}


@functools.cache
def host_extensions() -> frozenset[str]:
    """The extensions of `EXTENSIONS` this host's CPU has."""
    return frozenset(machine_facts()["extensions"])


def default_threads() -> int:
    """The cores this process may use: those of its CPU affinity, no more than its cgroup's CPU
    quota allows (`cgroup_cpus`: a container given 2 CPUs on a 64-core host runs 2 threads, not
    64 time-sliced — ONNX Runtime users' most common deployment complaint, onnxruntime#29510)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1
    quota = cgroup_cpus()
    return max(1, min(cores, quota)) if quota is not None else cores


CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpus(root: Path | None = None, membership: str | None = None) -> int | None:
    """The CPUs this process's cgroup CPU quota allows, ceil(quota / period), of the tightest
    quota on its cgroup and every cgroup above it — cgroups v2 (`cpu.max`: "QUOTA PERIOD", or
    "max PERIOD" for none) or v1 (`cpu.cfs_quota_us`, -1 for none, over `cpu.cfs_period_us`,
    under the `cpu` controller's folder); None where no quota applies or none can be read.
    `root`: where the cgroup filesystem is mounted (CGROUP_ROOT); `membership`:
    /proc/self/cgroup's text (read when not given). In a container the cgroup /proc names may
    be the host's path, which the container's mount lacks: its folders are looked for from the
    deepest up to the root."""
    root = CGROUP_ROOT if root is None else Path(root)
    if membership is None:
        try:
            membership = Path("/proc/self/cgroup").read_text()
        except OSError:
            membership = ""
    places: list[tuple[Path, str]] = []   # (hierarchy folder, the cgroup's path in it)
    for line in membership.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":                                    # v2's unified hierarchy
            places += [(root, path), (root / "unified", path)]
        elif "cpu" in controllers.split(","):                   # v1's cpu controller
            places += [(root / controllers, path), (root / "cpu", path)]
    places = places or [(root, "/"), (root / "cpu", "/")]
    limits = [n for folder, path in places for n in _quotas(folder, path)]
    return min(limits) if limits else None


def _quotas(folder: Path, path: str) -> list[int]:
    """ceil(quota / period) of each cgroup from `folder`/`path` up to `folder` that has a quota."""
    out, parts = [], [p for p in path.strip("/").split("/") if p and p != ".."]
    for depth in range(len(parts), -1, -1):
        here = folder.joinpath(*parts[:depth])
        quota_period = _read(here / "cpu.max")
        if quota_period is None:
            q, period = _read(here / "cpu.cfs_quota_us"), _read(here / "cpu.cfs_period_us")
            quota_period = None if q is None or period is None else q + period
        if quota_period is None or len(quota_period) != 2 or quota_period[0] in ("max", "-1"):
            continue
        try:
            quota, period = int(quota_period[0]), int(quota_period[1])
        except ValueError:
            continue
        if quota > 0 and period > 0:
            out.append(max(1, -(-quota // period)))
    return out


def _read(path: Path) -> list[str] | None:
    """The whitespace-separated words of a small file, None where it cannot be read."""
    try:
        return path.read_text().split()
    except (OSError, UnicodeDecodeError):
        return None


# The most threads any engine is given: the Halide pool's limit (spin_pool.c, 255 workers and
# the caller). More than the cores this process may use only with `force` (oversubscribed
# cores slow every engine: their threads wait for each other's time slices).
MAX_THREADS = 256


def check_threads(n, force: bool = False) -> int:
    """`n` if it is a thread count this machine should run (1 to its cores; with `force` up
    to MAX_THREADS), else a one-line OptionsError."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise OptionsError(f"threads must be a whole number, got {n!r}")
    n = int(n)          # (numpy's integers too: threads=np.int64(2))
    if n < 1:
        raise OptionsError(f"threads must be at least 1, got {n}")
    if n > MAX_THREADS:
        raise OptionsError(f"threads {n} is more than the {MAX_THREADS} any engine can use")
    cores = default_threads()
    if n > cores and not force:
        raise OptionsError(f"threads {n} is more than the {cores} cores this process may use "
                           "(its CPU affinity and cgroup quota; oversubscribing slows "
                           "every engine); force it with force_threads=True "
                           "(--force-threads)")
    return n


@dataclass(frozen=True)
class Target:
    kind: str = "cpu"
    threads: int = field(default_factory=default_threads)
    arch: str = field(default_factory=platform.machine)
    cpu: str = ""
    isa: tuple[str, ...] = ()
    device: GpuDevice | None = None        # the `cuda` kind's GPU

    @classmethod
    def parse(cls, spec: "str | Target | None", threads: int | None = None,
              force_threads: bool = False) -> "Target":
        if isinstance(spec, Target):
            return spec
        if spec is not None and not isinstance(spec, str):
            raise OptionsError(f"target must be 'cpu', 'cuda', 'cuda:DEVICE' or a Target, not "
                               f"a {type(spec).__name__}")
        kind, _, device = (spec or "cpu").strip().lower().partition(":")
        if kind not in ("cpu", "cuda") or (kind == "cpu" and device):
            raise WoodpeckerError(f"unknown target {spec!r}; this build supports: cpu, cuda, "
                                  "cuda:DEVICE (h100, a100, sm_80 ...)")
        cpu, isa = cpu_info()
        n = check_threads(threads, force_threads) if threads is not None else default_threads()
        gpu = _gpu(device) if kind == "cuda" else None
        # a GPU plan's host code is baseline for its architecture: it runs on the device's
        # host, not on this CPU (engines/halide/gpu/runtime_build.py)
        return cls(kind, n, platform.machine(), cpu, () if gpu else tuple(isa), gpu)

    @property
    def record_key(self) -> str:
        """What a tuning record is measured for (tune/records.py): the architecture, the vector
        extensions and the thread count; a kernel's speed on another is no guide here. A GPU
        kernel's: the device and its capability ("cuda:nvidia-h100-80gb-hbm3:sm_90")."""
        if self.device is not None:
            return f"cuda:{self.device.slug}:sm_{self.device.capability}"
        return f"{self.arch}:{','.join(self.isa)}:{self.threads}t"

    @property
    def halide_target(self) -> str:
        """The Halide target string kernels for this target are compiled for: the host's; for a
        GPU, the architecture's baseline with CUDA of the newest capability the device runs
        (gpu/devices.halide_capability)."""
        if self.device is None:
            return "host"
        base = {"x86_64": "x86-64-linux-sse41", "aarch64": "arm-64-linux"}.get(self.arch)
        if base is None:
            raise WoodpeckerError(f"GPU kernels are built for x86_64 or aarch64 hosts, not "
                                  f"{self.arch}")
        return f"{base}-cuda-cuda_capability_{halide_capability(self.device.capability)}"

    def incompatibility(self, host: "Target | None" = None) -> str | None:
        """Why code compiled for this target cannot run on `host` (default: this machine):
        another architecture, or vector extensions the host lacks; None when it can."""
        if self.device is not None:
            why = _device_missing(self.device, host)
            if why is not None:
                return why
        host = host or Target.parse("cpu")
        if self.arch and host.arch and self.arch != host.arch:
            return f"it was compiled for {self.arch}, this host is {host.arch}"
        missing = [f for f in self.isa if f not in host.isa]
        if missing:
            return (f"it was compiled for a CPU with {', '.join(missing)} "
                    f"({self.cpu or 'unknown CPU'}), which this host ({host.cpu or 'unknown'}) "
                    "lacks: recompile the model here")
        return None

    def to_json(self) -> dict:
        d = asdict(self)
        d["isa"] = list(self.isa)
        if self.device is None:
            d.pop("device")
        else:
            d["device"] = self.device.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Target":
        try:   # a plan may come from a larger machine: any count a machine could run
            threads = check_threads(d["threads"], force=True)
        except WoodpeckerError as e:
            raise ValueError(f"target {e}") from None
        if d["kind"] not in ("cpu", "cuda") or (d["kind"] == "cuda") != ("device" in d):
            raise ValueError(f"target kind {d['kind']!r} with{'' if 'device' in d else 'out'} "
                             "a device")
        device = GpuDevice.from_json(d["device"]) if "device" in d else None
        return cls(d["kind"], threads, d.get("arch", ""), d.get("cpu", ""),
                   tuple(d.get("isa", ())), device)

    @property
    def run_threads(self) -> int:
        """The threads a plan for this target runs with here: its own count, but never more
        than this host's cores (a plan compiled on a larger machine still runs, correctly)."""
        return min(self.threads, default_threads())


def _gpu(spec: str) -> GpuDevice:
    """The device of a `cuda[:spec]` target: this host's first (no spec), else the named one;
    one WoodpeckerError line otherwise."""
    if spec:
        try:
            return known_device(spec)
        except ValueError as e:
            raise WoodpeckerError(str(e)) from None
    try:
        return driver.host_device()
    except driver.NoDevice as e:
        raise WoodpeckerError(f"target cuda: {e}; to build for a device elsewhere name it, "
                              "e.g. --target cuda:h100 or cuda:sm_80") from None


def _device_missing(device: GpuDevice, host: "Target | None") -> str | None:
    """Why code built for `device` cannot run here: no CUDA device, or none new enough (the
    PTX of `halide_capability` JIT-compiles for any newer one); None when one can. `host`: a
    target standing for another host (its device; none: it has none)."""
    need = halide_capability(device.capability)
    if host is not None:
        if host.device is None or host.device.capability < need:
            return f"it was built for {device.describe()}, and that host has no such device"
        return None
    try:
        driver.host_device(need)
    except driver.NoDevice as e:
        return f"it was built for {device.describe()}: {e}"
    return None
