#!/usr/bin/python3
"""st-edit.py FILE OP ARGS - damage a safetensors file for the tests.

  hlen VALUE                 set the 8-byte header length
  set NAME KEY JSON          set header[NAME][KEY] = JSON, keeping the
                             header's length (re-padded with spaces) if
                             it fits
  rename NAME NEW            rename a tensor (NEW no longer than NAME)
  poke NAME OFFSET HEX       overwrite the tensor's bytes at OFFSET
The tensor data is left where it was (poke aside).
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
        if op == "poke":
            name, off, hexb = args
            f.seek(8 + n + hdr[name]["data_offsets"][0] + int(off))
            f.write(bytes.fromhex(hexb))
            return 0
        if op == "rename":
            hdr[args[1]] = hdr.pop(args[0])
        else:
            name, key, val = args
            hdr[name][key] = json.loads(val)
        text = json.dumps(hdr, separators=(",", ":")).encode()
        if len(text) > n:
            # a longer header: the data moves with it (offsets are
            # relative to the end of the header)
            text += b" " * (-len(text) % 8)
            f.seek(0)
            f.write(len(text).to_bytes(8, "little") + text + buf[8 + n:])
            return 0
        f.seek(8)
        f.write(text + b" " * (n - len(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
