"""The app as a user meets it on a GPU box, driven by Textual's Pilot: live NVML and capability,
the first screen saved, then `s` (smoke: the real checks in real workers) and its rows printed.

    python bench/app_trial.py --out DIR [--size 120x40]

Run after `ltx-tui --tune` to see that the smoke checks follow the tune cache (each row should
pass). Screenshots go to DIR as SVG; the rows to stdout as JSON; exit 1 when a row did not pass.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from textual.widgets import DataTable  # noqa: E402

from ltx_tui.app import LtxTuiApp  # noqa: E402


async def trial(out: Path, size: tuple[int, int], timeout: float) -> int:
    app = LtxTuiApp()
    async with app.run_test(size=size) as pilot:
        for _ in range(600):  # the live probe runs in a subprocess after the first frame
            await pilot.pause(0.1)
            if app.capability is not None:
                break
        await pilot.pause(1.5)  # an NVML reading
        app.save_screenshot(str(out / "first_screen.svg"))
        t0 = time.monotonic()
        await pilot.press("s")
        table = app.query_one("#smoke-table", DataTable)
        while time.monotonic() - t0 < timeout:
            await pilot.pause(0.5)
            if app._smoke_cancel is None and table.row_count:
                break
        app.save_screenshot(str(out / "smoke.svg"))
        rows = [[str(c) for c in table.get_row(str(k))] for k in range(table.row_count)]
        print(json.dumps({"capability": app.capability.source if app.capability else None,
                          "smoke_seconds": round(time.monotonic() - t0, 1), "rows": rows}, indent=1))
        return 0 if rows and all(r[1] == "pass" for r in rows) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", default="120x40")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    w, h = (int(x) for x in args.size.split("x"))
    return asyncio.run(trial(args.out, (w, h), args.timeout))


if __name__ == "__main__":
    sys.exit(main())
