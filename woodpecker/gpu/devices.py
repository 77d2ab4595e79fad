"""CUDA devices: what a GPU plan is built for, named in its target key and its blueprint.

Contract: `GpuDevice` holds the facts a schedule's validity and a cost model depend on —
compute capability, SMs, memory, L2, the per-block limits (threads, shared memory, registers)
— read from the driver on a host with the device (`driver.devices()`), or taken from
`KNOWN_DEVICES` to build on a machine without one (`--target cuda:h100`, `cuda:sm_80`).
`halide_capability` is the newest `cuda_capability_NN` feature the pinned Halide emits PTX
for that the device runs.

Choices written down:
- The table holds the data-sheet facts of the data-centre parts and two workstation parts
  (NVIDIA's architecture whitepapers and CUDA C Programming Guide, tables 21/23); a capability
  alone (`cuda:sm_80`) names the table's first device of it.
- Halide 21.0 knows capabilities up to 8.6. PTX is forward compatible (the driver JIT-compiles
  it for a newer device), so a sm_90 device (H100, H200) runs sm_86 PTX; it then misses only
  what PTX of 9.0 adds (wgmma, TMA), which Halide 21 does not emit anyway.
- `shared_per_block` is the static 48 KiB every kernel may use; the opt-in maximum
  (`shared_optin`) needs a launch attribute Halide's CUDA runtime does not set, so schedules
  are held to the 48 KiB.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30

# cuda_capability_NN features of the pinned Halide (21.0), newest last
HALIDE_CAPABILITIES = (30, 32, 35, 50, 61, 70, 75, 80, 86)


@dataclass(frozen=True)
class GpuDevice:
    name: str                       # the driver's name ("NVIDIA H100 80GB HBM3")
    capability: int                 # compute capability × 10 (9.0 → 90)
    sms: int                        # streaming multiprocessors
    memory: int                     # bytes of device memory
    l2: int                         # bytes of L2
    max_threads_per_block: int = 1024
    shared_per_block: int = 48 * KIB
    shared_optin: int = 48 * KIB
    registers_per_block: int = 65536
    warp: int = 32

    @property
    def slug(self) -> str:
        """The device's name as a target key part: "nvidia-h100-80gb-hbm3"."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")

    def describe(self) -> str:
        return (f"{self.name} (sm_{self.capability}, {self.sms} SMs, "
                f"{self.memory / GIB:.0f} GiB, L2 {self.l2 / MIB:.0f} MiB)")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "GpuDevice":
        """A device a plan recorded; ValueError naming the field that is missing or wrong."""
        try:
            dev = cls(**{k: (str(v) if k == "name" else int(v)) for k, v in d.items()
                         if k in cls.__dataclass_fields__})
        except (TypeError, ValueError) as e:
            raise ValueError(f"target device: {e}") from None
        if dev.capability < 30 or dev.sms < 1 or dev.max_threads_per_block < 1:
            raise ValueError(f"target device: implausible facts {d}")
        return dev


# Data-sheet facts; the short names are what `--target cuda:NAME` takes.
KNOWN_DEVICES: dict[str, GpuDevice] = {
    "h100": GpuDevice("NVIDIA H100 80GB HBM3", 90, 132, 80 * GIB, 50 * MIB,
                      shared_optin=227 * KIB),
    "h100-pcie": GpuDevice("NVIDIA H100 PCIe", 90, 114, 80 * GIB, 50 * MIB,
                           shared_optin=227 * KIB),
    "h200": GpuDevice("NVIDIA H200", 90, 132, 141 * GIB, 50 * MIB, shared_optin=227 * KIB),
    "a100": GpuDevice("NVIDIA A100-SXM4-80GB", 80, 108, 80 * GIB, 40 * MIB,
                      shared_optin=163 * KIB),
    "l4": GpuDevice("NVIDIA L4", 89, 58, 24 * GIB, 48 * MIB, shared_optin=99 * KIB),
    "a10": GpuDevice("NVIDIA A10", 86, 72, 24 * GIB, 6 * MIB, shared_optin=99 * KIB),
    "rtx4090": GpuDevice("NVIDIA GeForce RTX 4090", 89, 128, 24 * GIB, 72 * MIB,
                         shared_optin=99 * KIB),
    "t4": GpuDevice("Tesla T4", 75, 40, 16 * GIB, 4 * MIB, shared_optin=64 * KIB),
}


def halide_capability(capability: int) -> int:
    """The newest capability the pinned Halide emits PTX for that a device of `capability`
    runs (PTX JIT-compiles forward, never back); ValueError below the oldest."""
    usable = [c for c in HALIDE_CAPABILITIES if c <= capability]
    if not usable:
        raise ValueError(f"compute capability {capability / 10:.1f} is older than any Halide "
                         f"emits code for (sm_{HALIDE_CAPABILITIES[0]})")
    return usable[-1]


def known_device(spec: str) -> GpuDevice:
    """The device `spec` names: a short name of `KNOWN_DEVICES` ("h100"), or a compute
    capability ("sm_80", "80", "8.0") — the table's first device of it. ValueError listing
    what is known otherwise."""
    s = spec.strip().lower()
    if s in KNOWN_DEVICES:
        return KNOWN_DEVICES[s]
    m = re.fullmatch(r"(?:sm_?)?(\d)\.?(\d)", s)
    if m:
        cap = int(m.group(1)) * 10 + int(m.group(2))
        for dev in KNOWN_DEVICES.values():
            if dev.capability == cap:
                return dev
        caps = sorted({d.capability for d in KNOWN_DEVICES.values()})
        raise ValueError(f"no known device of compute capability {cap / 10:.1f} "
                         f"(known: {', '.join(f'sm_{c}' for c in caps)}); build on the "
                         "device itself with --target cuda")
    raise ValueError(f"unknown CUDA device {spec!r}; known: {', '.join(KNOWN_DEVICES)} or a "
                     "compute capability such as sm_80")
