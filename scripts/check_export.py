"""Does an export load, with the same outputs, in another transformers version? (cramming.model.export_check;
scripts/check_export.sh runs it per version.)

    python scripts/check_export.py make DIR    # with this project installed: a tiny export + reference outputs
    python scripts/check_export.py check DIR   # in any environment with torch and transformers: compare
"""

import sys
from pathlib import Path

from cramming.model.export_check import check, make

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("make", "check"):
        sys.exit("usage: python scripts/check_export.py make|check DIR")
    if sys.argv[1] == "make":
        make(Path(sys.argv[2]))
    else:
        sys.exit(check(Path(sys.argv[2])))
