from tests.conformance import selection


def pytest_collection_modifyitems(config, items):
    """Drop the backend tests that do not apply (rather than report thousands of skips)."""
    included = {f"{name}_cpu" for name in selection.INCLUDED}
    keep, drop = [], []
    for item in items:
        in_suite = "conformance" in str(item.path) and item.name.startswith("test_")
        (drop if in_suite and item.name not in included else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter):
    t = selection
    if not t.INCLUDED and not t.EXCLUDED:
        return
    terminalreporter.write_sep("-", "ONNX backend node tests of supported ops")
    terminalreporter.write_line(f"included: {len(t.INCLUDED)} per engine set; excluded as "
                                f"unsupported variants: {len(t.EXCLUDED)}")
    reasons: dict[str, int] = {}
    for r in t.EXCLUDED.values():
        key = r.split(" has element type ")[-1] if " has element type " in r else r
        reasons[key] = reasons.get(key, 0) + 1
    for r, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"  {n:>3} x {r[:110]}")
