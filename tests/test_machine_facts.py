"""`target.machine_facts`: how a benchmark result names its machine — the microarchitecture
from CPUID's vendor, family and model, the vector extensions, from /proc/cpuinfo's text."""

from woodpecker.target import ISA_FLAGS, machine_facts, microarchitecture

ZEN5 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
flags\t\t: fpu sse avx2 fma avx512f avx512bw avx512vl avx512_vnni avx512_bf16 avx_vnni

processor\t: 1
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
flags\t\t: amx_tile amx_bf16
"""


def test_names_the_first_processor_and_its_extensions():
    facts = machine_facts(ZEN5)
    assert facts["cpu"] == "AMD EPYC"
    assert (facts["vendor"], facts["family"], facts["model"]) == ("AuthenticAMD", 26, 2)
    assert facts["microarchitecture"] == "Zen 5"
    assert facts["isa"] == ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"]
    assert "avx512_bf16" in facts["extensions"] and "avx_vnni" in facts["extensions"]
    assert "amx_tile" not in facts["extensions"]     # the second processor's block is not read
    assert facts["cores"] >= 1


def test_microarchitectures_of_the_project_machines():
    assert microarchitecture("AuthenticAMD", 25, 0x01) == "Zen 3"     # EPYC Milan
    assert microarchitecture("AuthenticAMD", 25, 0x11) == "Zen 4"     # EPYC Genoa
    assert microarchitecture("AuthenticAMD", 26, 0x02) == "Zen 5"     # EPYC Turin
    assert microarchitecture("GenuineIntel", 6, 0x8F) == "Sapphire Rapids"
    assert microarchitecture("GenuineIntel", 6, 0x01) == ""
    assert microarchitecture("", -1, -1) == ""


def test_unreadable_cpuinfo_still_names_something():
    facts = machine_facts("")
    assert facts["cpu"] and facts["family"] == -1 and facts["microarchitecture"] == ""
    assert facts["isa"] == [] and facts["extensions"] == []


def test_the_record_key_flags_are_unchanged():
    # the tuning database's records are keyed by these: adding one would orphan them
    assert ISA_FLAGS == ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                         "amx_tile")
