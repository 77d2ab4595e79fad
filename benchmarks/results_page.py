"""The results page (`docs/results.md`) and the README's results table, made from the JSON files
under `benchmarks/results/` — no number on either is typed by hand.

Contract: `SETS` (benchmarks/results_sets.py) names each published result (its files, what it
measured, the command that made it); `render_page()` is the page and `render_summary()` the
README's table (between the `BEGIN`/`END` markers), each with the machine (CPU, ISA) and the
versions the files record. `python benchmarks/results_page.py` rewrites both; `--check` exits
1 where either differs (tests/bench/test_results_page.py runs it). A new published result adds
its set there.

Ratios: Woodpecker's median over the other runtime's (< 1: Woodpecker faster); "faster library"
is per round the faster of ONNX Runtime and OpenVINO; a geomean of such ratios over models;
"paired" is the median over rounds of the per-round ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.results_sets import SETS, ResultSet  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
BEGIN, END = "<!-- results table: benchmarks/results_page.py -->", "<!-- end of results table -->"
BAR = 1.02   # issue 50's bar after a tune: Woodpecker within 2 % of the faster library


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _machine(machine: dict | None, versions: dict | None) -> str:
    machine, versions = machine or {}, versions or {}
    isa = ", ".join(machine.get("isa", [])) or "ISA not recorded"
    runtimes = ", ".join(f"{k} {v.split('-')[0].split('+')[0]}" for k, v in versions.items()
                         if k in ("onnxruntime", "openvino", "torch", "halide", "numpy"))
    cpu = " ".join(filter(None, (machine.get("cpu", "CPU not recorded"),
                                 machine.get("microarchitecture"))))
    return f"{cpu} ({isa}); {runtimes}"


def _f(x, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(r) + " |" for r in rows]]


def _open_world(doc: dict) -> tuple[list[str], dict]:
    rows, out = sorted(doc["models"], key=lambda r: (r["group"], r["name"])), []
    for r in rows:
        ms = r["median_ms"]
        out.append([r["name"], r["group"], r["plan"], f"{r['generated_time_share']:.0%}",
                    _f(ms["woodpecker"]), _f(ms["onnxruntime"]), _f(ms.get("openvino")),
                    _f(r["ratio_to_faster_library"]), _f(r["paired_vs_faster_library"]),
                    f"{r['max_rel_diff_vs_ort']:.1e}",
                    f"{r['ort_unoptimized_rel_diff']:.1e}"
                    if r.get("ort_unoptimized_rel_diff") is not None else "–",
                    _f(r["compile_s"], 1)])
    lines = _table(["model", "group", "plan", "generated time", "ours ms", "ORT ms",
                    "OpenVINO ms", "ours ÷ faster library", "paired", "diff vs ORT",
                    "ORT noise", "compile s"], out)
    return lines, _open_world_summary(rows)


def _open_world_summary(rows: list[dict]) -> dict:
    ratios = {r["name"]: r["ratio_to_faster_library"] for r in rows}
    best = min(ratios, key=ratios.get)
    over = sorted((n for n, x in ratios.items() if x > BAR), key=ratios.get, reverse=True)
    generated = sum(1 for r in rows if r["generated_time_share"] > 0)
    return {"models": len(rows), "geomean": _geomean(list(ratios.values())),
            "best": f"{best} {ratios[best]:.3f}",
            "over": ", ".join(f"{n} {ratios[n]:.3f}" for n in over) or "none",
            "generated": generated,
            "compile": f"{min(r['compile_s'] for r in rows):.0f}–"
                       f"{max(r['compile_s'] for r in rows):.0f}",
            "machine": _machine(rows[0].get("machine"), rows[0].get("versions"))}


# -- tuned_e2e.py's files ---------------------------------------------------------------------

def _tuned_e2e(doc: dict) -> tuple[list[str], dict]:
    out, ratios = [], {}
    for name, r in doc["models"].items():
        inv = {k: 1 / v for k, v in r["paired_speedup_vs"].items()}
        ratios[name] = inv["fastest library"]
        out.append([name, _f(inv["fastest library"]), _f(inv.get("onnxruntime")),
                    _f(inv.get("openvino")), _f(inv.get("torch")),
                    f"{r['generated_flops_share']:.0%}", f"{r['generated_time_share']:.0%}",
                    _f(r["compile_seconds"], 0), f"{r['max_rel_diff']:.1e}"])
    lines = _table(["model", "ours ÷ faster library", "÷ ORT", "÷ OpenVINO", "÷ torch",
                    "generated FLOPs", "generated time", "compile s", "diff vs ORT"], out)
    best = min(ratios, key=ratios.get)
    over = sorted((n for n, x in ratios.items() if x > 1), key=ratios.get, reverse=True)
    return lines, {"models": len(ratios), "geomean": _geomean(list(ratios.values())),
                   "best": f"{best} {ratios[best]:.3f}",
                   "over": ", ".join(f"{n} {ratios[n]:.3f}" for n in over) or "none",
                   "machine": _machine(doc.get("machine"), doc.get("versions")),
                   "search": doc.get("search", "")}


# -- torch_compile.py's files -----------------------------------------------------------------

def _torch_compile(doc: dict) -> tuple[list[str], dict]:
    runtimes = ["woodpecker", "eager", "inductor", "onnxruntime", "openvino"]
    out = [[name, *(_f(r["results"][k]["median_ms"], 2) if k in r["results"] else "–"
                    for k in runtimes)] for name, r in doc["models"].items()]
    lines = _table(["model", 'backend="woodpecker" ms', "eager", "inductor", "ONNX Runtime",
                    "OpenVINO"], out)
    return lines, {"models": len(out),
                   "machine": _machine(doc.get("machine"), doc.get("versions"))}


def _quantized(doc: dict) -> tuple[list[str], dict]:   # quantized.py's files
    keys = ("woodpecker", "onnxruntime", "openvino", "woodpecker_fp32")
    out = []
    for r in doc["models"]:      # a file quantized by its authors: no fp32 plan, no SQNR
        o = (r["outputs"] or [{}])[0]
        kind = " (dynamic)" if r["dynamic"] else " (its authors' int8)" if r.get("as_is") else \
            " (ONNX Runtime's QOperator file)" if r.get("qoperator") else ""
        agree = o.get("top1_agreement")
        ms = {**r["median_ms"], **({"openvino": "cannot read it"}
                                   if r.get("openvino_refused") else {})}
        out.append([r["name"] + kind, r["plan"], *(ms[k] if isinstance(ms.get(k), str) else
                                                   _f(ms.get(k), 2) for k in keys),
                    _f(r["ours_over_faster_library"]["median"]),
                    _f(r["int8_speedup_over_our_fp32"], 2), _f(o.get("sqnr_db"), 1),
                    "–" if agree is None else f"{100 * agree:.1f} %"])
    return _table(["model", "int8 plan", "ours int8 ms", "ONNX Runtime", "OpenVINO", "ours fp32 "
                   "ms", "paired ÷ faster library", "int8 speed-up", "SQNR dB", "top-1 agreement"],
                  out), \
        {"models": len(out), "machine": _machine(doc.get("machine"), doc.get("versions"))}


def _precision(doc: dict) -> tuple[list[str], dict]:   # precision.py's files
    keys = ("woodpecker", "onnxruntime", "openvino_bf16", "openvino_f32", "woodpecker_fp32")
    out = []
    for r in doc["models"]:
        acc = r["accuracy_vs_onnxruntime_fp32"]
        ours, ov = acc["woodpecker_bf16"][0], acc["openvino_bf16"][0]
        agree = ours.get("top1_agreement")
        out.append([r["name"], r["plan"], *(_f(r["median_ms"].get(k), 2) for k in keys),
                    _f(r["ours_over_faster_library"]["median"]),
                    _f(r["bf16_speedup_over_our_fp32"], 2),
                    f"{_f(ours['sqnr_db'], 1)} / {_f(ov['sqnr_db'], 1)}",
                    "–" if agree is None else f"{100 * agree:.1f} %"])
    return _table(["model", "bf16 plan", "ours bf16 ms", "ONNX Runtime (fp32)", "OpenVINO bf16",
                   "OpenVINO f32", "ours fp32 ms", "paired ÷ faster of ORT, OpenVINO bf16",
                   "bf16 speed-up", "SQNR dB ours / OpenVINO", "top-1 agreement"], out), \
        {"models": len(out), "machine": _machine(doc.get("machine"), doc.get("versions"))}


def _schedules(doc: dict) -> tuple[list[str], dict]:   # int8_schedules.py's files
    out = []
    for r in doc["rows"]:
        first, second = r["variants"]
        q = r["paired_ratio"]["quartiles"]
        out.append([r["choice"], r["layer"], f"{first} {_f(r['median_ms'][first])}",
                    f"{second} {_f(r['median_ms'][second])}",
                    f"{_f(r['paired_ratio']['median'])} ({_f(q[0])}-{_f(q[1])})"])
    return _table(["choice", "layer", "first, ms", "second, ms",
                   "second ÷ first, paired median (quartiles)"], out), \
        {"models": len(out), "machine": _machine(doc.get("machine"), doc.get("versions"))}


KINDS: dict[str, Callable[[dict], tuple[list[str], dict]]] = {"open_world": _open_world,
    "tuned_e2e": _tuned_e2e, "torch_compile": _torch_compile, "quantized": _quantized,
    "precision": _precision, "schedules": _schedules}


def _section(s: ResultSet) -> list[str]:
    doc = _load(s.file)
    lines, summary = KINDS[s.kind](doc)
    head = [f"## {s.title}", "", s.what, "",
            f"Machine: {summary['machine']}. File: `benchmarks/results/{s.file}`"
            + (f" ({doc['note']})" if doc.get("note") else "") + ".", "",
            f"    {s.command.format(file='benchmarks/results/' + s.file)}", ""]
    tail = [""]
    if "geomean" in summary:
        tail = ["", f"Geomean of ours ÷ faster library over {summary['models']} models: "
                    f"**{summary['geomean']:.3f}**; best {summary['best']}; over "
                    f"{BAR if s.kind == 'open_world' else 1.0}: {summary['over']}.", ""]
    return head + lines + tail


def render_page() -> str:
    lines = ["# Results", "",
             "Generated by `python benchmarks/results_page.py` from `benchmarks/results/`; "
             "do not edit by hand. " + __doc__.split("Ratios:", 1)[1].strip().replace("\n", " "),
             ""]
    for s in SETS:
        lines += _section(s)
    return "\n".join(lines).rstrip() + "\n"


# the README's table: the current state first, then the runs it is compared with
HEADLINES = ("realworld-3m-zen5", "realworld-3m", "zoo-3m", "open-world-untuned")


def render_summary() -> str:
    """The README's table: the headline sets, one line each."""
    rows, machines = [], {}
    for key in HEADLINES:
        s = next(x for x in SETS if x.key == key)
        _, summary = KINDS[s.kind](_load(s.file))
        machines.setdefault(s.machine, summary["machine"])
        rows.append([s.title, s.machine, str(summary["models"]), f"{summary['geomean']:.3f}",
                     summary["best"], summary["over"]])
    return "\n".join([BEGIN, *_table(["run", "machine", "models",
                                      "ours ÷ faster library (geomean)", "best",
                                      f"over {BAR}"], rows), "",
                      *(f"- {short}: {machine}." for short, machine in machines.items()), END])


def _readme(text: str) -> str:
    if BEGIN not in text or END not in text:
        raise SystemExit(f"README.md lacks the markers {BEGIN!r} … {END!r}")
    before, rest = text.split(BEGIN, 1)
    return before + render_summary() + rest.split(END, 1)[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true",
                   help="exit 1 where docs/results.md or the README's table differ")
    args = p.parse_args(argv)
    page, readme = render_page(), _readme(README.read_text())
    if args.check:
        stale = [str(f.relative_to(ROOT)) for f, want in ((PAGE, page), (README, readme))
                 if not f.exists() or f.read_text() != want]
        if stale:
            print(f"out of date (run python benchmarks/results_page.py): {', '.join(stale)}")
            return 1
        return 0
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(page)
    README.write_text(readme)
    print(f"wrote {PAGE.relative_to(ROOT)} and the README's table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
