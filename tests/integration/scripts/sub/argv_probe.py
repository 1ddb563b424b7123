"""Writes what the interpreter gave the script to the JSON file named by argv[1]."""

import json
import os
import sys

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
            },
            fh,
        )
