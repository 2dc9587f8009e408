#!/usr/bin/python3
"""gen-corpus.py - the tokenizer conformance corpus, testdata/tok/corpus.jsonl.

One JSON object per line: {"name": ..., "text": ...}.  Hand-written cases
for every kind of text the issue lists (prose, code, CJK, Arabic, Hindi,
emoji and ZWJ sequences, combining marks, digit runs, punctuation runs,
whitespace variants, CRLF and lone CR, long words, special-token strings,
Unicode 15/16/17 characters) plus texts cut from Debian's own files
(/usr/share/common-licenses, man pages) and seeded random strings, so the
file is the same on every run.

Usage: scripts/ref/gen-corpus.py > testdata/tok/corpus.jsonl
"""
import gzip
import json
import random
import sys

cases = []


def add(name, text):
    cases.append({"name": name, "text": text})


# ---- prose and code -------------------------------------------------------
add("prose", "The quick brown fox jumps over the lazy dog. It's 5 o'clock, isn't it? We'll see; they've gone.")
add("prose-caps", "HELLO World! I'M HERE. DON'T STOP. Y'ALL'D'VE known.")
add("contractions", "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'Ve 'LL 'D x's y'ſ 'ſ Hello's")
add("c", '#include <stdio.h>\n\nint main(int argc, char **argv)\n{\n\tfor (int i = 0; i < argc; i++)\n\t\tprintf("%d: %s\\n", i, argv[i]);\n\treturn 0;\n}\n')
add("python", "def f(x: int) -> list[int]:\n    \"\"\"Doc.\"\"\"\n    return [i**2 for i in range(x) if i % 3 == 0]  # squares\n\nprint(f(10))\n")
add("json", '{"name": "ds", "version": 1, "ids": [0, 1, 2], "nested": {"a": null, "b": true, "c": -1.5e-3}}')
add("shell", "#!/bin/sh\nset -eu\nfor f in *.txt; do\n  wc -l \"$f\" | awk '{print $1}' >> out.log 2>&1 && echo ok || exit 1\ndone\n")
add("url-email", "See https://example.com/a/b?c=d&e=f#g or mail foo.bar+baz@example.org.")

# ---- scripts ------------------------------------------------------------------
add("chinese", "深度求索是一家人工智能公司。我们今天去北京，天气很好！你好，世界。")
add("chinese-rare", "龦龧龨 鿐鿑 㐀㐁 𠀀𠀁 𪜀 𫝀 𬺰 𰀀 𱍐")
add("japanese", "こんにちは、世界。カタカナとひらがな、漢字を混ぜた文章です。ｶﾀｶﾅ ｰ")
add("korean", "안녕하세요, 세계! 한국어 문장입니다. 가나다라마바사")
add("arabic", "مرحبا بالعالم! هذه جملة عربية. ٠١٢٣٤٥٦٧٨٩ والأرقام ١٢٣")
add("hindi", "नमस्ते दुनिया। यह एक हिंदी वाक्य है। ०१२३४५६७८९")
add("mixed-scripts", "Hello世界こんにちは안녕Привет مرحبا नमस्ते Γειά σου שלום ሰላም")
add("cyrillic-greek", "Съешь же ещё этих мягких французских булок. Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.")
add("thai-lao", "สวัสดีครับ ภาษาไทย ສະບາຍດີ")

# ---- emoji ----------------------------------------------------------------------
add("emoji", "I ❤️ tokens 😀😃😄 👍🏽 🇫🇷🇯🇵 🔥🔥🔥 ✨")
add("emoji-zwj", "👨‍👩‍👧‍👦 👩🏽‍💻 🏳️‍🌈 🏴‍☠️ 🧑‍🤝‍🧑 👁️‍🗨️ ❤️‍🔥")
add("emoji-new", "Unicode 15: 🫨🫷🫸🪼 Unicode 15.1: 🐦‍🔥 Unicode 16: 🫩🫆🪾 ᭎ 𐵐𐵑 Unicode 17: 🫪 𐥀𐥁")
add("unicode-new-letters", "Kawi 𑼄𑼅𑼆 NagMundari 𞓐𞓑 Garay 𐵐𐵒 Todhri 𐗀𐗁 Sunuwar 𑯀𑯁 CJK-H 𱍐𱍑 CJK-J 𲎰 Sidetic 𐥀 ʕʔʕ")

# ---- marks, digits, punctuation ------------------------------------------------------
add("combining", "e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 Z\u0351\u0346\u036a\u0364a\u0361\u0350l\u0363\u0308g\u0311\u0304o\u0307 x\u20dd \u1ab0\u1dc0")
add("nfc-nfkc", "ﬁ ﬂ ① ㈱ Å Å ẛ̣ ｆｕｌｌ　ｗｉｄｔｈ ½ ℌ ™ ㎏ Ⅻ")
for n in range(1, 26):
    add(f"digits-{n}", "".join(str((i * 7 + n) % 10) for i in range(n)))
add("digits-mixed", "1 12 123 1234 12345 123456 1,234,567.89 3.14159 0x1F 1e10 -42 +7 2026-12-02 10:30:45 ①②③ ٣٤٥ ४५६ １２３ ²³")
add("punct-runs", "!!! ??? ... --- *** ### ::: ;;; ,,, \"\"\" ''' ((( ))) [[[ ]]] {{{ }}} <<< >>> ~~~ ``` @@@ $$$ %%% ^^^ &&& |||")
add("punct-mixed", "Wait...what?! (Really?) [yes] {no} <maybe> «quote» „German“ “curly” ‘single’ — – … ・ 、。！？；：")
add("punct-letters", "$hello #world @user .dotfile ,comma -dash _under /path \\back ~tilde !bang ?q :colon ;semi")

# ---- whitespace ---------------------------------------------------------------------
add("spaces-lead", "   leading spaces")
add("spaces-trail", "trailing spaces   ")
add("spaces-multi", "a  b   c    d     e      f")
add("spaces-only", "     ")
add("tabs", "\tone\t\ttwo\t\t\tthree \t mixed\t")
add("newlines", "line1\nline2\n\nline4\n\n\n")
add("crlf", "line1\r\nline2\r\n\r\nline4\r\n")
add("lone-cr", "a\rb\r\rc \r d\r")
add("vt-ff", "a\vb\fc\x1cd\x1fe")
add("unicode-spaces", "a\u00a0b\u2000c\u2003d\u2009e\u200af\u202fg\u205fh\u3000i\u1680j\u0085k\u2028l\u2029m")
add("zero-width", "a\u200bb\u200cc\u200dd\ufeffe\u180ef\u2060g")
add("space-newline-mix", "  \n  \n\t\n \r\n x  \n")

# ---- long words ------------------------------------------------------------------------
add("long-a", "a" * 3000)
add("long-word", "Pneumonoultramicroscopicsilicovolcanoconiosis" * 40)
add("long-digits", "9" * 2000)
add("long-cjk", "汉字" * 800)
add("long-space", " " * 1500 + "x")
add("long-punct", "!?" * 1000)

# ---- special-token strings -----------------------------------------------------------------
add("special-v3", "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi!<｜Assistant｜><think>\nhmm\n</think>Hello<｜end▁of▁sentence｜>")
add("special-v3-tools", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
add("special-partial", "<｜User <｜Use｜> <｜User｜<｜User｜>> <｜｜> <| <think <think>>")
add("special-chatml", "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|endoftext|>")
add("special-llama3", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|reserved_special_token_5|>")
add("special-sp", "<s> hello </s> <unk> <pad> [INST] x [/INST]")

# added tokens with lstrip / rstrip / single_word / normalized, which the
# v3extra and llama2extra files of scripts/ref/make-hf.js define
add("added-strip", "a <|ls|> b   <|rs|>   c \t<|both|>\n d <|ls|><|rs|>  <|ls|>")
add("added-word", "swx aswx swxb swx. (swx) swx_1 x\u00b2swx \u00c9\u00c9 \u00e9\u00c9\u00c9 swx")
add("added-norm", "use <tool> now<tool>  Zed Zedd aZed <|r|>   x <|r|>\n")

# ---- from Debian's files ------------------------------------------------------------------------
def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


gpl = read("/usr/share/common-licenses/GPL-3")
add("doc-gpl3", gpl[:6000])
add("doc-apache", read("/usr/share/common-licenses/Apache-2.0")[:4000])
add("doc-mpl", read("/usr/share/common-licenses/MPL-2.0")[2000:5000])
for page in ("bash.1", "ls.1", "tar.1"):
    try:
        with gzip.open(f"/usr/share/man/man1/{page}.gz", "rt", encoding="utf-8", errors="replace") as f:
            add("man-" + page, f.read()[3000:7000])
    except OSError:
        pass

# ---- seeded random strings --------------------------------------------------------------------------
rng = random.Random(20261202)
pools = [
    (0x20, 0x7e), (0xa0, 0x24f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff),
    (0x590, 0x6ff), (0x900, 0x97f), (0xe00, 0xe7f), (0x1100, 0x11ff), (0x1e00, 0x1fff),
    (0x2000, 0x206f), (0x20a0, 0x20cf), (0x2100, 0x27bf), (0x3000, 0x30ff),
    (0x4e00, 0x9fff), (0xac00, 0xd7a3), (0xff00, 0xffef), (0x10000, 0x1014f),
    (0x10900, 0x10dff), (0x11000, 0x11fff), (0x1d400, 0x1d7ff), (0x1e000, 0x1e9ff),
    (0x1f300, 0x1faff), (0x20000, 0x2a6df), (0x30000, 0x323af),
]
ws = [" ", " ", " ", "\n", "\t", "\r\n", "  "]
for k in range(120):
    parts = []
    for _ in range(rng.randint(1, 40)):
        r = rng.random()
        if r < 0.15:
            parts.append(rng.choice(ws))
        elif r < 0.25:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 8))))
        else:
            a, b = rng.choice(pools)
            cps = [rng.randint(a, b) for _ in range(rng.randint(1, 8))]
            parts.append("".join(chr(c) for c in cps if not 0xd800 <= c <= 0xdfff))
    add(f"random-{k}", "".join(parts))

# seeded mixes of the pieces where tokenizers differ: whitespace kinds,
# scripts, marks, digits, contractions, special-token strings, emoji
atoms = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u0085", "\u2028",
         "a", "Z", "\u00e9", "\u00df", "\u4e2d", "\u6587", "\u306e", "\u30ab", "\ud55c",
         "\u0639", "\u0939", "\u093c", "\u0301", "1", "23", "\u0663", "\uff11", "!", "?",
         ".", ",", "-", "'s", "'S", "'ll", "(", ")", "<", ">", "|", "\uff5c",
         "<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>",
         "<think>", "</think>", "<|im_start|>", "<|eot_id|>", "<s>", "</s>", "<|user|>",
         "\U0001f600", "\U0001f44d\U0001f3fd", "\u200d", "\ufeff", "\u180e", "x", "hello",
         "World", "_", "$", "\u20ac", "\u00a9", "\u00b2", "\u017f", "\u0130", "\u01c5",
         "\u216b", "\ufb01", "\u2460", "\u2581", "\\", "\"", "`", "~"]
for k in range(150):
    add(f"mix-{k}", "".join(rng.choice(atoms) for _ in range(rng.randint(1, 14))))

for c in cases:
    sys.stdout.write(json.dumps(c, ensure_ascii=False) + "\n")
