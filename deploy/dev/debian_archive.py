"""Print the Debian archive URI this machine's apt already uses (for bookworm/forky fetches)."""

from __future__ import annotations

import os
import pathlib
import re
import sys


def main() -> int:
    if os.environ.get("SLINKY_DEBIAN_ARCHIVE"):
        print(os.environ["SLINKY_DEBIAN_ARCHIVE"].rstrip("/"))
        return 0
    texts: list[str] = []
    for path in [
        pathlib.Path("/etc/apt/sources.list"),
        *sorted(pathlib.Path("/etc/apt/sources.list.d").glob("*")),
    ]:
        if path.is_file() and not path.name.endswith(".disabled-by-farm"):
            texts.append(path.read_text(errors="replace"))
    for text in texts:
        for uri in re.findall(r"^URIs:\s*(\S+)", text, flags=re.M) + re.findall(
            r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+\S+", text, flags=re.M
        ):
            if "security" not in uri and "debian" in uri:
                print(uri.rstrip("/"))
                return 0
    print("no Debian archive found in /etc/apt sources; set SLINKY_DEBIAN_ARCHIVE", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
