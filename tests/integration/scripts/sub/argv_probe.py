"""Writes what the interpreter gave the script to the JSON file named by argv[1], and the
frames above the script's own top-level frame."""

import json
import os
import sys


def frames_above() -> list[str]:
    frame, above = sys._getframe(1), []
    while frame.f_back is not None:
        frame = frame.f_back
        above.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
    return above


if __name__ == "__main__":
    with open(sys.argv[1], "w") as fh:
        json.dump(
            {
                "argv": sys.argv,
                "file": __file__,
                "name": __name__,
                "path0": sys.path[0],
                "cwd": os.getcwd(),
                "main_file": sys.modules["__main__"].__file__,
                "frames_above": frames_above(),
            },
            fh,
        )
