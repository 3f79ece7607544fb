"""benchmarks/run_all.py: the target checks and the page rendered from the benchmarks' JSON."""

import json

import run_all  # benchmarks/ is on the tests' path (setup.cfg)

MACHINE = {"device": "CPU: test", "cpu_threads": 2, "torch": "2.x", "transformers": "5.x", "command": "python b.py"}


def test_targets_report_the_worst_row_and_whether_it_meets_the_target():
    rows = [{"mode": "train", "throughput ratio": 0.99, "total memory ratio": 1.00, "step peak ratio": 1.00},
            {"mode": "infer", "throughput ratio": 0.96, "total memory ratio": 1.02, "step peak ratio": 1.08}]
    lines = run_all.check_targets("vit", rows)
    assert lines == [
        "- throughput ratio (every row): worst 0.960, target >= 0.97: **not met**",
        "- total memory ratio (every row): worst 1.020, target <= 1.03: **met**",
        "- step peak ratio (mode train): worst 1.000, target <= 1.03: **met**",  # the infer row's 1.08 is not in scope
    ]


def test_render_writes_every_table_with_its_machine_and_the_notes(tmp_path):
    out, docs = tmp_path / "results", tmp_path / "docs"
    out.mkdir()
    rows = [{"mode": "hidden", "seconds": 3.0, "× inference": 1.25}]
    (out / "diagnostics.json").write_text(json.dumps({"title": "t", "machine": MACHINE, "rows": rows}))
    (out / "notes.md").write_text("Measured on a test machine.")
    text = run_all.render(out, docs)
    assert (docs / "benchmarks.md").read_text() == text
    assert "Measured on a test machine." in text
    assert "| mode | seconds | × inference |" in text and "| hidden | 3.000 | 1.250 |" in text
    assert "device CPU: test" in text and "`python b.py`" in text
    assert "worst 1.250, target <= 1.5: **met**" in text
    assert "NeuTRENO ViT vs the native ViT" not in text  # no JSON, no section
