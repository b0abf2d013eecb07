"""`qkv` on PATH after `pip install` of the wheel: runs the command-line tool it carries."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "qkv")
    if not os.access(exe, os.X_OK):
        sys.exit(f"qkv: {exe} is missing: this installation of the qkv package has no "
                 "command-line tool (build it with cmake, or install the wheel of "
                 "scripts/build_wheel.sh)")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
