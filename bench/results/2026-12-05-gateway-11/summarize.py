"""Tables of this round from the benchmark's JSON files: python summarize.py f-uv-run1 f-as-run1 f-i16-run1 f-as-run2 f-uv-run2 f-i16-run2 uv-run1 as-run1 as-run2 uv-run2
(each NAME.json beside this file). The code is bench/gateway_summary.py, shared by the rounds (its docstring
says what each figure is)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
from gateway_summary import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["--dir", str(Path(__file__).resolve().parent), *sys.argv[1:]]))
