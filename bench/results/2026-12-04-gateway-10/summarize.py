"""Tables of this round from the benchmark's JSON files: python summarize.py new-run1 base-run1 base-run2 new-run2
(each NAME.json beside this file). The code is bench/gateway_summary.py, shared by the rounds (its docstring
says what each figure is)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
from gateway_summary import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["--dir", str(Path(__file__).resolve().parent), *sys.argv[1:]]))
