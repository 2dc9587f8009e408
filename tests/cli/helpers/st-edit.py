#!/usr/bin/python3
"""st-edit.py FILE OP ARGS - damage a safetensors file for the tests.

  hlen VALUE                 set the 8-byte header length
  set NAME KEY JSON          set header[NAME][KEY] = JSON, keeping the
                             header's length (re-padded with spaces)
The tensor data is left where it was.
"""
import json
import sys


def main(path, op, *args):
    with open(path, "r+b") as f:
        buf = f.read()
        n = int.from_bytes(buf[:8], "little")
        if op == "hlen":
            f.seek(0)
            f.write(int(args[0]).to_bytes(8, "little"))
            return 0
        hdr = json.loads(buf[8:8 + n])
        name, key, val = args
        hdr[name][key] = json.loads(val)
        text = json.dumps(hdr, separators=(",", ":")).encode()
        if len(text) > n:
            sys.exit("st-edit: the new header does not fit")
        f.seek(8)
        f.write(text + b" " * (n - len(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
