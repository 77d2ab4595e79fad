def pytest_terminal_summary(terminalreporter):
    from tests.conformance import selection as t

    if not t.INCLUDED and not t.EXCLUDED:
        return
    terminalreporter.write_sep("-", "ONNX backend node tests of supported ops")
    terminalreporter.write_line(f"included: {len(t.INCLUDED)}; excluded as unsupported "
                                f"variants: {len(t.EXCLUDED)}")
    reasons: dict[str, int] = {}
    for r in t.EXCLUDED.values():
        reasons[r] = reasons.get(r, 0) + 1
    for r, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"  {n:>3} × {r[:110]}")
