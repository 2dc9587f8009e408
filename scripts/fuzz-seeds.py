#!/usr/bin/python3
"""fuzz-seeds.py - seed inputs for the fuzz targets, from testdata.

Usage: scripts/fuzz-seeds.py OUTDIR [BIN]

Writes OUTDIR/<target>/<name> for every target of tests/fuzz/: real files
from testdata/ (configs, safetensors, tokenizers, prompts), small versions
of the big ones (tokenizer.json files cut to their first 400 tokens, the
merges among them, with their normalizers and pre-tokenizers intact), and
what the programs in BIN (default bin) write from them (model.meta and
tokenizer.bin of converted golden checkpoints, ds-tune plans and state
files of the fake roots of tests/cli/mkfakeroot.sh).  Nothing here is
committed: scripts/fuzz.sh calls it to (re)build build/fuzz/seeds/.
"""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

OUT = sys.argv[1]
BIN = sys.argv[2] if len(sys.argv) > 2 else "bin"
GOLDEN = sorted(glob.glob("testdata/golden/*/"))
HF = sorted(glob.glob("testdata/cache/hf/*/"))   # fetched by the tok tests
SP = sorted(glob.glob("testdata/tok/sp/*.model"))


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(p):
    with open(p, "rb") as f:
        return f.read()


def case(d):
    return os.path.basename(d.rstrip("/"))


def safetensors(tensors, meta=None, pad=True):
    """tensors: [(name, dtype, shape, bytes)] laid out back to back."""
    hdr, off, data = {}, 0, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape, b in tensors:
        hdr[name] = {"dtype": dt, "shape": shape,
                     "data_offsets": [off, off + len(b)]}
        off += len(b)
        data += b
    h = json.dumps(hdr, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


DT_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "U8": 1, "I8": 1}


def small_st(b):
    """The tensors of a safetensors file, each cut to at most 2 x 2
    elements (names and dtypes as they were)."""
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    out = []
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        shape = [min(x, 2) for x in t["shape"]]
        cnt = 1
        for x in shape:
            cnt *= x
        out.append((name, t["dtype"], shape,
                    bytes((i * 37) & 0xff for i in range(cnt * DT_BYTES[t["dtype"]]))))
    return safetensors(out, hdr.get("__metadata__"))


def seeds_safetensors():
    for d in GOLDEN:
        put("safetensors", case(d), small_st(read(d + "model.safetensors")))
    put("safetensors", "small", safetensors([
        ("a", "F32", [2, 3], bytes(range(24))),
        ("b", "BF16", [4], b"\x80\x3f" * 4),
        ("c", "I32", [1, 2], b"\xff" * 8),
        ("s", "F16", [], b"\x00\x3c"),
        ("z", "U8", [0, 5], b"")], meta={"format": "pt"}))
    put("safetensors", "fp4", safetensors([("q", "F4", [2, 4], b"\x12\x34\x56\x78"),
                                           ("e", "F8_E4M3", [3], b"\x01\x02\x03")]))
    put("safetensors", "empty", safetensors([], meta={}))


def seeds_stindex():
    wm = {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
          "model.norm.weight": "model-00001-of-00002.safetensors",
          "lm_head.weight": "model-00002-of-00002.safetensors"}
    put("stindex", "good", json.dumps({"metadata": {"total_size": 24},
                                       "weight_map": wm}, indent=2))
    one = {k: v for k, v in wm.items() if v.endswith("1-of-00002.safetensors")}
    put("stindex", "one-shard", json.dumps({"weight_map": one}))
    bad = dict(wm, **{"lm_head.weight": "../model-00002-of-00002.safetensors"})
    put("stindex", "traversal", json.dumps({"weight_map": bad}))


def seeds_configs():
    for d in GOLDEN:
        cfg = read(d + "config.json")
        put("hfconfig", case(d), cfg)
        c = json.loads(cfg)
        if "quantization_config" in c:
            put("qconfig", case(d), cfg)
            put("qconfig", case(d) + "-settings",
                json.dumps(c["quantization_config"]))
    put("qconfig", "autogptq-quantize_config", json.dumps(
        {"bits": 4, "group_size": 128, "damp_percent": 0.01, "desc_act": True,
         "static_groups": False, "sym": False, "true_sequential": True,
         "model_name_or_path": None, "model_file_base_name": "model",
         "quant_method": "gptq", "checkpoint_format": "gptq_v2"}))
    put("qconfig", "old-autoawq-quant_config", json.dumps(
        {"zero_point": True, "q_group_size": 128, "w_bit": 4, "version": "GEMM"}))
    put("qconfig", "fp8", json.dumps({"quantization_config": {
        "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
        "weight_block_size": [128, 128]}}))


def small_hf(tj, keep=400):
    """A tokenizer.json cut to its first `keep` ids (and the merges among
    them); added tokens, normalizer, pre-tokenizer and decoder intact."""
    d = json.loads(tj)
    m = d.get("model", {})
    if m.get("type") != "BPE":
        return None
    vocab = {k: v for k, v in m["vocab"].items() if v < keep}
    merges = []
    for mg in m.get("merges", []):
        a, b = mg.split(" ", 1) if isinstance(mg, str) else mg
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(mg)
    m["vocab"], m["merges"] = vocab, merges
    base = len(vocab)
    for i, t in enumerate(d.get("added_tokens", [])[:8]):
        t["id"] = base + i
    d["added_tokens"] = d.get("added_tokens", [])[:8]
    return json.dumps(d, ensure_ascii=False).encode()


def varint(b, i):
    x = s = 0
    while True:
        c = b[i]
        i += 1
        x |= (c & 0x7f) << s
        s += 7
        if not c & 0x80:
            return x, i


def enc_varint(x):
    o = b""
    while True:
        c = x & 0x7f
        x >>= 7
        if x:
            o += bytes([c | 0x80])
        else:
            return o + bytes([c])


def small_sp(b, keep=300):
    """A SentencePiece ModelProto with only its first `keep` normal pieces
    (field 1) and every other piece (control, unknown, byte, user); the
    trainer and normalizer specs as they were."""
    out, i, n = b"", 0, 0
    while i < len(b):
        start = i
        key, i = varint(b, i)
        wt = key & 7
        if wt == 0:
            _, i = varint(b, i)
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        elif wt == 2:
            ln, i = varint(b, i)
            body = b[i:i + ln]
            i += ln
            if key >> 3 == 1:
                # SentencePiece.type (field 3): NORMAL = 1 or absent
                t, j = 1, 0
                while j < len(body):
                    k, j = varint(body, j)
                    if k & 7 == 0:
                        v, j = varint(body, j)
                        if k >> 3 == 3:
                            t = v
                    elif k & 7 == 2:
                        ln2, j = varint(body, j)
                        j += ln2
                    elif k & 7 == 5:
                        j += 4
                    else:
                        j += 8
                if t == 1:
                    n += 1
                    if n > keep:
                        continue
                out += enc_varint(key) + enc_varint(ln) + body
                continue
        out += b[start:i]
    return out


def seeds_tokenizers():
    seen = set()
    for d in GOLDEN:
        tj = read(d + "tokenizer.json")
        if tj not in seen:
            seen.add(tj)
            put("tokjson", case(d), tj)
        put("tokconfig", case(d), read(d + "tokenizer_config.json"))
    for d in HF:
        s = small_hf(read(d + "tokenizer.json"))
        if s is not None:
            put("tokjson", "small-" + case(d), s)
        if os.path.exists(d + "tokenizer_config.json"):
            put("tokconfig", case(d), read(d + "tokenizer_config.json"))
    for p in SP:
        # the nmt_nfkc charsmap alone is 240 kB: two models keep one
        b = small_sp(read(p))
        if len(b) < 64 << 10 or os.path.basename(p) in ("uni.model",
                                                         "bpe-bf.model"):
            put("spmodel", os.path.basename(p), b)


def seeds_text():
    with open("testdata/tok/corpus.jsonl", encoding="utf-8") as f:
        rows = [json.loads(l) for l in f]
    for i, r in enumerate(rows[:200]):
        t = r["text"].encode("utf-8", "surrogateescape")
        if len(t) <= 4096:
            put("tokencode", "%03d" % i, t)
    for d in GOLDEN:
        put("tokids", case(d), read(d + "prompt.ids"))
    put("tokids", "lines", "1 2 3\n\n 4\t5\r\n128000 0\n")


def seeds_jinja():
    """The real chat templates (scripts/ref/fetch-jinja.sh fetches them;
    the jinja tests run it) and the conversations' texts."""
    for p in sorted(glob.glob("testdata/cache/chat/templates/*.json")):
        with open(p, encoding="utf-8") as f:
            put("jinja", os.path.basename(p)[:-5], json.load(f)["template"])


def seeds_reasoning():
    """R1 answers as a model streams them: the flag byte (prompt opened
    the block, cuts), cut places, the text."""
    answers = [b"Let me think.\n</think>\n\nThe answer is 4.",
               b"<think>\nhm\n</think>\n\nHi", b"Hello there",
               b"a \n</thi", b"x</think>y</think>z", b"  <thinking> no"]
    for i, a in enumerate(answers):
        put("reasoning", "%02d" % i, bytes([i & 1 | 6, 30, 90, 200]) + a)


def serve_kind(body):
    """The endpoint byte of fuzz_servereq for a body."""
    if b'"add_generation_prompt"' in body:
        return 3
    if b'"messages"' in body:
        return 1
    if b'"tokens"' in body or b'"content"' in body:
        return 2
    return 0


def seeds_serve():
    """The request bodies and header values of the ds-serve tests, and a
    few of every field's type."""
    import ast
    import re
    src = read("tests/cli/ds-serve.bats").decode("utf-8")
    bodies = set()
    for m in re.finditer(r"'(\{[^'\n]*\})'", src):
        bodies.add(m.group(1).encode("utf-8"))
    for m in re.finditer(r"\bb'((?:[^'\\\n]|\\.)*)'", src):
        try:
            bodies.add(ast.literal_eval("b'" + m.group(1) + "'"))
        except (ValueError, SyntaxError):
            pass
    for m in re.finditer(r"'(\"[a-z_]+\": [^'\n]*)'", src):
        bodies.add(('{"prompt": "p", %s}' % m.group(1)).encode("utf-8"))
    bodies |= {
        b'{"prompt": [[1, 2, 3]], "stop": ["a", "b"], "seed": 7, "top_k": 40}',
        b'{"prompt": ["one"], "stream": true, "stream_options": '
        b'{"include_usage": true}, "max_tokens": 4}',
        b'{"messages": [{"role": "developer", "content": [{"type": "text", '
        b'"text": "a"}, {"type": "text", "text": "b"}]}, {"role": "assistant"}],'
        b' "max_completion_tokens": 3, "response_format": {"type": "text"}}',
        b'{"content": "Hello w\xc3\xb6rld", "add_special": true, "with_pieces": true}',
        b'{"tokens": [1, 2, 999]}',
        b'{"messages": [{"role": "user", "content": "x"}], '
        b'"add_generation_prompt": false, "chat_template_kwargs": {"t": 1}}',
        b'{"messages": [{"role": "user", "content": "x"}], "reasoning_format": '
        b'"none", "chat_template_kwargs": {"enable_thinking": false}}',
        b'{"prompt": "x", "n": 1, "best_of": 1, "logprobs": false, '
        b'"echo": false, "suffix": "", "logit_bias": {}, "tools": [], '
        b'"presence_penalty": 0, "frequency_penalty": 0.0, "ignore_eos": true, '
        b'"return_tokens": true, "repeat_penalty": 1.1, "min_p": 0.05}',
    }
    for i, b in enumerate(sorted(bodies)):
        k = serve_kind(b)
        put("servereq", "%03d" % i, bytes([k]) + b)
        put("servereq", "%03d-v1" % i, bytes([k | 4]) + b)
    hdr = {"auth-ok": b"\x00k3y-x\nBearer k3y-x",
           "auth-lower": b"\x00k3y-x\nbearer k3y-x",
           "auth-short": b"\x00k3y-x\nBearer k3y-",
           "auth-basic": b"\x00k3y-x\nBasic k3y-x",
           "len-ok": b"\x01" + struct.pack("<Q", 1 << 20) + b"1048576",
           "len-big": b"\x01" + struct.pack("<Q", 1 << 20) + b"1048577",
           "len-huge": b"\x01" + struct.pack("<Q", 1 << 20) + b"9" * 30,
           "len-neg": b"\x01" + struct.pack("<Q", 100) + b"-1",
           "len-space": b"\x01" + struct.pack("<Q", 100) + b" 5"}
    for m in re.finditer(r"Authorization: ([^\"']*)", src):
        hdr["auth-%d" % len(hdr)] = b"\x00k3y-1\n" + m.group(1).encode()
    for ep in ("/v1/completions", "/v1/chat/completions", "/v1/models",
               "/health", "/metrics", "/tokenize", "/detokenize",
               "/apply-template", "/nothing"):
        hdr["path" + ep.replace("/", "-")] = b"\x02" + ep.encode()
    for name, b in hdr.items():
        put("servehdr", name, b)


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, **kw)


def seeds_models(tmp):
    conv = os.path.join(BIN, "ds-convert")
    if not os.access(conv, os.X_OK):
        print("fuzz-seeds: no %s: no model.meta or tokenizer.bin seeds"
              % conv, file=sys.stderr)
        return []
    models = []
    for d in GOLDEN:
        dst = os.path.join(tmp, case(d))
        run(conv, "--model-path", d, "--output-dir", dst, "--quiet")
        put("modelmeta", case(d), read(dst + "/model.meta"))
        models.append(dst)
    for dst in models[:3]:
        put("tokbin", case(dst), read(dst + "/tokenizer.bin"))
    for p in SP:
        if len(read(p)) < 64 << 10:
            # ds-convert is what writes a tokenizer.bin
            ck = os.path.join(tmp, "sp-" + os.path.basename(p))
            shutil.copytree(GOLDEN[0], ck)
            os.remove(ck + "/tokenizer.json")
            os.remove(ck + "/tokenizer_config.json")
            shutil.copy(p, ck + "/tokenizer.model")
            dst = ck + ".out"
            try:
                run(conv, "--model-path", ck, "--output-dir", dst, "--quiet")
                put("tokbin", os.path.basename(p), read(dst + "/tokenizer.bin"))
            except subprocess.CalledProcessError as e:
                print("fuzz-seeds: %s: %s" % (p, e.stderr.decode().strip()),
                      file=sys.stderr)
    return models


def seeds_tune(tmp, models):
    tune = os.path.join(BIN, "ds-tune")
    for kind in ("intel", "amd", "container", "nohuge"):
        root = os.path.join(tmp, "root-" + kind)
        run("tests/cli/mkfakeroot.sh", kind, root)
        for name in ("proc/interrupts", "proc/meminfo", "proc/cpuinfo",
                     "sys/devices/system/cpu/online",
                     "proc/irq/default_smp_affinity",
                     "proc/self/mountinfo"):
            p = os.path.join(root, name)
            if os.path.exists(p):
                put("sysinfo", kind + "-" + name.replace("/", "_"),
                    "==> /%s <==\n" % name + read(p).decode())
        if not os.access(tune, os.X_OK) or not models:
            continue
        for js in ([], ["--json"]):
            r = subprocess.run([tune, "plan", "-m", models[0], "--root", root,
                                "--instances", "2"] + js, capture_output=True)
            if r.returncode == 0:
                put("tuneplan", kind + ("-json" if js else "-text"), r.stdout)
        st = os.path.join(tmp, "state-" + kind + ".json")
        r = subprocess.run([tune, "apply", "-m", models[0], "--root", root,
                            "--state", st], capture_output=True)
        if r.returncode == 0 and os.path.exists(st):
            put("tuneplan", kind + "-state", read(st))


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    seeds_safetensors()
    seeds_stindex()
    seeds_configs()
    seeds_tokenizers()
    seeds_text()
    seeds_serve()
    seeds_jinja()
    seeds_reasoning()
    tmp = tempfile.mkdtemp(prefix="ds-fuzz-seeds.")
    try:
        models = seeds_models(tmp)
        seeds_tune(tmp, models)
    finally:
        shutil.rmtree(tmp)
    for t in sorted(os.listdir(OUT)):
        print("%-12s %4d seeds" % (t, len(os.listdir(os.path.join(OUT, t)))))


main()
