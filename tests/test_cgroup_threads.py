"""The default thread count follows a container's CPU quota (cgroups v2 `cpu.max`, v1
`cpu.cfs_quota_us`/`cpu.cfs_period_us`), not only the CPU affinity (issue 76, onnxruntime#29510):
the reader is pointed at a temporary folder laid out like /sys/fs/cgroup."""

from __future__ import annotations

import os

import pytest

from woodpecker import target
from woodpecker.errors import WoodpeckerError
from woodpecker.target import cgroup_cpus, check_threads, default_threads


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_v2_quota_rounds_up_to_whole_cpus(tmp_path):
    _write(tmp_path / "cpu.max", "150000 100000\n")
    assert cgroup_cpus(tmp_path, "0::/\n") == 2
    _write(tmp_path / "cpu.max", "50000 100000\n")
    assert cgroup_cpus(tmp_path, "0::/\n") == 1


def test_v2_without_a_quota_is_no_limit(tmp_path):
    _write(tmp_path / "cpu.max", "max 100000\n")
    assert cgroup_cpus(tmp_path, "0::/\n") is None
    assert cgroup_cpus(tmp_path / "missing", "0::/\n") is None


def test_v2_the_tightest_quota_of_the_cgroup_and_those_above_it(tmp_path):
    _write(tmp_path / "kubepods" / "pod" / "cpu.max", "max 100000")
    _write(tmp_path / "kubepods" / "cpu.max", "300000 100000")
    _write(tmp_path / "cpu.max", "800000 100000")
    assert cgroup_cpus(tmp_path, "0::/kubepods/pod\n") == 3


def test_v1_quota_under_the_cpu_controller_even_where_proc_names_the_hosts_path(tmp_path):
    controller = tmp_path / "cpu,cpuacct"
    _write(controller / "cpu.cfs_quota_us", "250000\n")
    _write(controller / "cpu.cfs_period_us", "100000\n")
    # the container's mount is its own cgroup; /proc names the host's /docker/<id>
    membership = "12:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n"
    assert cgroup_cpus(tmp_path, membership) == 3
    _write(controller / "cpu.cfs_quota_us", "-1\n")
    assert cgroup_cpus(tmp_path, membership) is None


def test_default_threads_is_the_affinity_capped_by_the_quota(tmp_path, monkeypatch):
    affinity = len(os.sched_getaffinity(0))
    # whichever hierarchy this host's /proc/self/cgroup names, the root's quota applies
    _write(tmp_path / "cpu.max", "100000 100000")
    _write(tmp_path / "cpu" / "cpu.cfs_quota_us", "100000")
    _write(tmp_path / "cpu" / "cpu.cfs_period_us", "100000")
    monkeypatch.setattr(target, "CGROUP_ROOT", tmp_path)
    assert default_threads() == 1
    assert target.Target.parse("cpu").threads == 1
    if affinity > 1:
        with pytest.raises(WoodpeckerError, match="cgroup quota"):
            check_threads(2)
    _write(tmp_path / "cpu.max", "max 100000")
    _write(tmp_path / "cpu" / "cpu.cfs_quota_us", "-1")
    assert default_threads() == affinity


def test_a_numpy_integer_is_a_thread_count():
    """threads=np.int64(1) (a count computed with numpy) was 'threads must be a whole
    number'; booleans and floats still are not."""
    import numpy as np
    import pytest

    from woodpecker.errors import OptionsError

    assert check_threads(np.int64(1)) == 1 and type(check_threads(np.int32(1))) is int
    for bad in (True, 1.0, np.float32(1)):
        with pytest.raises(OptionsError, match="whole number"):
            check_threads(bad)
