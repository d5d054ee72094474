"""`python -m voxrt.loadgen.compare`: the table, the ratios to the first run and the overlaid plots."""

import json

import pytest

from voxrt.loadgen.compare import main, ratios


def summary(capacities, points):
    return {"capacity_rps": capacities,
            "points": [{"rate": r, "attainment": a, "ttfa_p99_ms": p99, "goodput_rps": r * a} for r, a, p99 in points]}


def write(tmp_path, name, s):
    d = tmp_path / name
    d.mkdir()
    (d / "summary.json").write_text(json.dumps(s))
    return d


def test_table_ratios_and_plots(tmp_path, capsys):
    a = write(tmp_path, "a", summary({"90%": 10.0, "99%": 8.0}, [(8, 1.0, 150.0), (10, 0.92, 190.0), (12, 0.5, None)]))
    c = write(tmp_path, "c", summary({"90%": 15.0, "99%": None}, [(10, 0.98, 120.0), (15, 0.95, 160.0)]))
    out = tmp_path / "out"
    assert main([f"(a) base=x={a}", f"(c) deadline={c}", "--out", str(out)]) == 0  # labels may hold '='
    text = (out / "compare.md").read_text()
    assert text == capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("| (")]
    assert rows[0].split(" | ")[1:5] == ["10 req/s", "8 req/s", "1.00", "1.00"]
    assert rows[1].split(" | ")[1:5] == ["15 req/s", "none", "1.50", "-"]
    # attainment per rate on the union of rates; a rate a run did not measure is "-"
    assert rows[0].rstrip(" |").split(" | ")[-4:] == ["100.0", "92.0", "50.0", "-"]
    assert rows[1].rstrip(" |").split(" | ")[-4:] == ["-", "98.0", "-", "95.0"]
    for name in ("compare_attainment.png", "compare_p99_ttfa.png", "compare_goodput.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ratio_is_none_without_a_baseline_capacity():
    runs = [("a", summary({"90%": None, "99%": 4.0}, [])), ("b", summary({"90%": 6.0, "99%": 6.0}, []))]
    assert ratios(runs)["b"] == {"90%": None, "99%": 1.5}


def test_bad_arguments(tmp_path, capsys):
    assert main([f"a={tmp_path / 'missing'}", "--out", str(tmp_path / "o")]) == 2
    assert "cannot read" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["no-equals-sign", "--out", str(tmp_path / "o")])


def test_a_partial_run_is_read_on_its_points(tmp_path, capsys):
    a = write(tmp_path, "a", summary({"90%": 10.0, "99%": 8.0}, [(8, 1.0, 150.0)]))
    partial = summary({}, [(8, 1.0, 100.0), (10, 0.95, 120.0), (12, 0.85, 300.0)]) | {"complete": False}
    c = write(tmp_path, "c", partial)
    assert main([f"a={a}", f"c={c}", "--out", str(tmp_path / "o")]) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| c")][0]
    assert row.startswith("| c (partial) | 10 req/s | 8 req/s | 1.00 | 1.00 |")


def test_a_point_with_failed_requests_shows_their_share(tmp_path, capsys):
    """Refused (or otherwise failed) requests count as missed; the table says how many there were, so a capacity
    reached by refusing some is read as such."""
    plain = summary({"90%": 10.0, "99%": None}, [(10, 0.95, 150.0)])
    refusing = summary({"90%": 12.0, "99%": None}, [(10, 0.99, 120.0), (12, 0.96, 140.0)])
    refusing["points"][1] |= {"requests": 1000, "failed": 28}
    refusing["points"][0] |= {"requests": 800, "failed": 0}
    a, w = write(tmp_path, "a", plain), write(tmp_path, "w", refusing)
    assert main([f"a={a}", f"w={w}", "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    row = [line for line in text.splitlines() if line.startswith("| w")][0]
    assert row.rstrip(" |").split(" | ")[-2:] == ["99.0", "96.0 (2.8% failed)"]
    assert "a failed request counts as missed" in text
    a2 = write(tmp_path, "a2", plain)
    assert main([f"a={a2}", "--out", str(tmp_path / "o2")]) == 0
    assert "failed" not in capsys.readouterr().out  # no note without failures
