"""Drive the app headless on this machine (live NVML, the real capability probe) and save
screenshots: `python bench/app_screenshot.py OUT_DIR [WIDTHxHEIGHT ...]`."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ltx_tui.app import LtxTuiApp  # noqa: E402


async def shoot(out: Path, size: tuple[int, int]) -> None:
    app = LtxTuiApp(None, None)
    async with app.run_test(size=size) as pilot:
        t0 = time.monotonic()
        while app.capability is None and time.monotonic() - t0 < 120:
            await pilot.pause(0.2)
        await pilot.pause(1.5)  # a few NVML readings for the sparklines
        print(f"{size}: capability {'ready' if app.capability else 'missing'} after "
              f"{time.monotonic() - t0:.1f} s; {app.sub_title}")
        for key in ("o", "r", "n", "g"):
            await pilot.press(key)
            await pilot.pause(0.3)
            app.save_screenshot(str(out / f"app_{size[0]}x{size[1]}_{key}.svg"))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    sizes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[2:]] or [(80, 24), (160, 50)]
    for size in sizes:
        asyncio.run(shoot(out, size))


if __name__ == "__main__":
    main()
