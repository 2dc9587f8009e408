#!/usr/bin/env bats
# ds-convert.bats - the converter on generated checkpoints of every
# architecture and quantization, archives, and every bad input.
#
# Correctness is judged by helpers independent of the C code:
# tests/cli/helpers/compare-quant.py (AWQ/GPTQ: every weight against
# s * (q - z) of the generator's integers) and compare-float.py (float
# checkpoints: exact, or within the RTN bound), both reading the runtime
# layouts with scripts/ckpt.py as ds-model(5) defines them.

PY=/usr/bin/python3

gen() { $PY scripts/gen-fixture.py "$@"; }
conv() { "$DS_BIN/ds-convert" "$@"; }

# Work in memory where there is /dev/shm: each conversion fsyncs.
setup_file() {
	: "${DS_BIN:=bin}"
	export DS_BIN
	F=$(mktemp -d /dev/shm/ds-convert-bats.XXXXXX 2>/dev/null || mktemp -d)
	export F
	gen --arch llama --out "$F/llama"
	gen --arch llama --dtype f16 --shards 3 --seed 2 --out "$F/llama_f16"
	gen --arch qwen2 --dtype f32 --out "$F/qwen"
	gen --arch deepseek_v2 --out "$F/v2lite"
	gen --arch deepseek_v2 --q-lora-rank 128 --topk-method group_limited_greedy \
		--shards 2 --out "$F/v2q"
	gen --arch deepseek_v3 --out "$F/v3"
	gen --arch deepseek_v2 --quant awq --group-size 64 --out "$F/v2awq" --raw "$F/v2awq.raw"
	gen --arch deepseek_v3 --quant awq --group-size 32 --shards 2 --out "$F/v3awq" \
		--raw "$F/v3awq.raw"
	gen --arch deepseek_v3 --quant gptq --desc-act --group-size 64 --out "$F/v3gptq" \
		--raw "$F/v3gptq.raw"
	gen --arch llama --quant gptq --asym --format gptq_v2 --group-size 128 \
		--qconfig quantize_config.json --out "$F/llgptq" --raw "$F/llgptq.raw"
	gen --arch qwen2 --quant gptq --bits 8 --group-size 32 --out "$F/qw8" --raw "$F/qw8.raw"
	gen --arch deepseek_v2 --quant gptq --bits 8 --asym --desc-act --group-size 128 \
		--out "$F/v2g8a" --raw "$F/v2g8a.raw"
}

teardown_file() {
	rm -rf "$F"
}

setup() {
	T=$F/t$BATS_TEST_NUMBER
	mkdir -p "$T"
	O=$T/out
}

teardown() {
	rm -rf "$T"
}

# the conversion fails: exit 1, one line "ds-convert: ..." containing each
# further argument, and no output directory or temporary left behind
refuse() {
	local src=$1 w
	shift
	run conv --model-path "$src" --output-dir "$O" --quiet
	echo "$output"
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "${lines[0]}" == "ds-convert: "* ]]
	for w in "$@"; do
		[[ "$output" == *"$w"* ]] || { echo "missing: $w"; return 1; }
	done
	[ ! -e "$O" ]
	! compgen -G "$O.tmp-*"
}

# a copy of fixture $1 to damage
copy() {
	cp -r "$F/$1" "$T/src"
	echo "$T/src"
}

edit_json() { # FILE PYTHON-STATEMENTS-ON-d
	$PY -c 'import json,sys
p = sys.argv[1]; d = json.load(open(p)); exec(sys.argv[2]); json.dump(d, open(p, "w"))' "$1" "$2"
}

meta() { # MODEL PYTHON-EXPRESSION-ON-m: prints it
	$PY -c 'import json,sys; m = json.load(open(sys.argv[1] + "/model.meta")); print(eval(sys.argv[2]))' "$1" "$2"
}

float_ok() { # SRC MODEL
	run $PY tests/cli/helpers/compare-float.py "$1" "$2"
	echo "$output"
	[ "$status" -eq 0 ]
}

quant_ok() { # RAW MODEL
	run $PY tests/cli/helpers/compare-quant.py "$1" "$2"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == "compared "* ]]
}

# ---- the command line ------------------------------------------------------

@test "-h and --help print the usage to stdout; --version the version" {
	run conv -h
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "usage: ds-convert --model-path SRC --output-dir DST"* ]]
	run conv --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"ds-convert --inspect SRC"* ]]
	run conv --version
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^ds-convert\ [0-9]+\.[0-9]+\.[0-9]+$ ]]
}

@test "usage errors exit 2 with a message" {
	for args in "" "--model-path $F/llama" "--output-dir $O" \
		"--model-path $F/llama --output-dir $O --quantize q3" \
		"--model-path $F/llama --output-dir $O --group-size 48" \
		"--model-path $F/llama --output-dir $O --threads 0" \
		"--model-path $F/llama --output-dir $O --quant-format exl2" \
		"--inspect $F/llama --model-path $F/llama" "--bogus" "stray"; do
		run conv $args
		echo "$args: $output"
		[ "$status" -eq 2 ]
		[[ "${lines[0]}" == "ds-convert: "* ]]
	done
	[ ! -e "$O" ]
}

@test "a missing SRC is a runtime error" {
	refuse "$F/nonexistent" "nonexistent"
}

# ---- float checkpoints ----------------------------------------------------------

@test "llama bf16: kept exactly, every tensor named and shaped as ds-model(5) says" {
	conv --model-path "$F/llama" --output-dir "$O" --quiet
	float_ok "$F/llama" "$O"
	[ "$(meta "$O" 'm["arch"], m["quant"]["source"], m["hparams"]["rope_scaling"]["type"]')" = "('llama', 'none', 'llama3')" ]
	[ "$(meta "$O" 'm["hparams"]["rope_style"], m["hparams"]["n_head_kv"]')" = "('neox', 2)" ]
	run conv --verify "$O"
	[ "$status" -eq 0 ]
	[[ "$output" == *"every CRC-32 matches"* ]]
}

@test "sharded f16 llama: kept as f16" {
	conv --model-path "$F/llama_f16" --output-dir "$O" --quiet
	float_ok "$F/llama_f16" "$O"
	[ "$(meta "$O" '[t["type"] for t in m["tensors"] if t["name"] == "blk.1.ffn_down"][0]')" = f16 ]
}

@test "qwen2 f32 with tied embeddings: q/k/v biases, no output tensor" {
	conv --model-path "$F/qwen" --output-dir "$O" --quiet
	float_ok "$F/qwen" "$O"
	[ "$(meta "$O" '"output" in [t["name"] for t in m["tensors"]]')" = False ]
	[ "$(meta "$O" 'm["hparams"]["tie_embeddings"], m["hparams"]["qkv_bias"]')" = "(1, 1)" ]
}

@test "deepseek_v2 with q_lora_rank null and set, greedy and group-limited routing" {
	conv --model-path "$F/v2lite" --output-dir "$O" --quiet
	float_ok "$F/v2lite" "$O"
	[ "$(meta "$O" 'm["hparams"]["q_lora_rank"], m["hparams"]["topk_method"]')" = "(0, 'greedy')" ]
	[ "$(meta "$O" 'm["hparams"]["rope_scaling"]["mscale_all_dim"], m["hparams"]["rope_style"]')" = "(0.707, 'interleaved')" ]
	conv --model-path "$F/v2q" --output-dir "$O.q" --quiet
	float_ok "$F/v2q" "$O.q"
	[ "$(meta "$O.q" 'm["hparams"]["q_lora_rank"], m["hparams"]["n_group"], m["hparams"]["topk_group"], m["hparams"]["topk_method"]')" = "(128, 4, 2, 'group_limited_greedy')" ]
}

@test "deepseek_v3: noaux_tc router with its bias, the MTP layer kept" {
	grep -q '"model.layers.3.eh_proj.weight"' "$F/v3/model.safetensors"
	conv --model-path "$F/v3" --output-dir "$O" --quiet
	float_ok "$F/v3" "$O"
	# DeepSeek's MTP embedding and head are copies of the main ones
	[ "$(meta "$O" 'm["hparams"]["n_mtp"], m["hparams"]["mtp_shares_embd"], m["hparams"]["mtp_shares_head"]')" = "(1, 1, 1)" ]
	[ "$(meta "$O" '" ".join(t["name"] for t in m["tensors"] if t["name"].startswith("mtp."))')" = "mtp.enorm mtp.hnorm mtp.eh_proj mtp.head_norm" ]
	[ "$(meta "$O" 'len([t for t in m["tensors"] if t["name"].startswith("blk.3.")])')" -eq 17 ]
	[ "$(meta "$O" 'm["hparams"]["n_layer"], m["hparams"]["expert_scoring"], m["hparams"]["topk_method"], m["hparams"]["n_group"]')" = "(3, 'sigmoid', 'noaux_tc', 4)" ]
	[ "$(meta "$O" '[t["type"] + str(t["shape"]) for t in m["tensors"] if t["name"] in ("blk.1.exp_probs_b", "blk.1.ffn_gate_inp")]')" = "['f32[8, 128]', 'f32[8]']" ]
	[ "$(meta "$O" '[t["shape"] for t in m["tensors"] if t["name"] == "blk.2.ffn_down_exps"][0]')" = "[8, 128, 128]" ]
}

@test "--quantize q8 and q4 with every --group-size, within the RTN bound" {
	for qg in v2q:q4:32 llama:q8:32 llama:q4:64 v2q:q8:64 llama:q4:128 llama:q8:128; do
		IFS=: read -r src q g <<<"$qg"
		rm -rf "$O"
		conv --model-path "$F/$src" --output-dir "$O" --quantize $q --group-size $g --quiet
		float_ok "$F/$src" "$O"
		[ "$(meta "$O" 'm["quant"]["source"], m["quant"]["type"]')" = "('rtn', '${q}g$g')" ]
		# embeddings and routers stay float, the output projection q8
		[ "$(meta "$O" '[t["type"] for t in m["tensors"] if t["name"] in ("token_embd", "blk.1.ffn_gate_inp", "output")]')" = "$([ $src = v2q ] && echo "['bf16', 'f32', 'q8g$g']" || echo "['bf16', 'q8g$g']")" ]
	done
}

@test "--quantize keep is the default and --threads does not change the bytes" {
	conv --model-path "$F/llama" --output-dir "$O.a" --quantize keep --quiet
	conv --model-path "$F/llama" --output-dir "$O.b" --quiet
	cmp "$O.a/model.bin" "$O.b/model.bin"
	conv --model-path "$F/v3" --output-dir "$O.1" --quantize q4 --threads 1 --quiet
	conv --model-path "$F/v3" --output-dir "$O.2" --quantize q4 --threads 2 --quiet
	cmp "$O.1/model.bin" "$O.2/model.bin"
	conv --model-path "$F/v3awq" --output-dir "$O.3" --threads 1 --quiet
	conv --model-path "$F/v3awq" --output-dir "$O.4" --threads 2 --quiet
	cmp "$O.3/model.bin" "$O.4/model.bin"
}

# ---- AWQ and GPTQ ----------------------------------------------------------------

@test "AWQ GEMM g64 (deepseek_v2): every weight equals s*(q-z) of the packed integers" {
	conv --model-path "$F/v2awq" --output-dir "$O" --quiet
	quant_ok "$F/v2awq.raw" "$O"
	[ "$(meta "$O" 'm["quant"]')" = "{'source': 'awq', 'bits': 4, 'group_size': 64, 'type': 'q4g64'}" ]
	# what AWQ leaves in float stays float
	[ "$(meta "$O" '[t["type"] for t in m["tensors"] if t["name"] in ("token_embd", "blk.1.ffn_gate_inp", "output", "blk.1.attn_kv_a")]')" = "['bf16', 'q4g64', 'f32', 'bf16']" ]
}

@test "AWQ GEMM g32, sharded (deepseek_v3): exact, MTP layer kept" {
	conv --model-path "$F/v3awq" --output-dir "$O" --quant-format awq --quiet
	quant_ok "$F/v3awq.raw" "$O"
	# the MTP layer's decoder layer is quantized like any other
	[ "$(meta "$O" 'm["hparams"]["n_mtp"], [t["type"] for t in m["tensors"] if t["name"] in ("blk.3.ffn_up_exps", "mtp.eh_proj")]')" = "(1, ['bf16', 'q4g32'])" ]
}

@test "AWQ with modules_to_not_convert: those modules stay float" {
	gen --arch deepseek_v2 --quant awq --not-convert kv_b_proj --out "$T/s" \
		--raw "$T/s.raw"
	conv --model-path "$T/s" --output-dir "$O" --quiet
	quant_ok "$T/s.raw" "$O"
	[ "$(meta "$O" '[t["type"] for t in m["tensors"] if t["name"] in ("blk.0.attn_kv_b", "blk.0.attn_kv_a")]')" = "['q4g64', 'bf16']" ]
}

@test "GPTQ 4-bit act-order (v1 zeros): inputs reordered, NAME.perm written, exact" {
	conv --model-path "$F/v3gptq" --output-dir "$O" --quiet
	quant_ok "$F/v3gptq.raw" "$O"
	[ "$(meta "$O" '[t["type"] + str(t["shape"]) for t in m["tensors"] if t["name"] in ("blk.0.attn_kv_b.perm", "blk.1.ffn_up_exps.perm")]')" = "['i32[128]', 'i32[8, 128]']" ]
	[ "$(meta "$O" 'm["hparams"]["n_mtp"], [t["type"] for t in m["tensors"] if t["name"] in ("blk.3.attn_kv_b", "blk.3.attn_kv_b.perm")]')" = "(1, ['q4g64', 'i32'])" ]
	run conv --verify "$O"
	[ "$status" -eq 0 ]
}

@test "GPTQ 4-bit asymmetric gptq_v2 from quantize_config.json: exact" {
	[ -e "$F/llgptq/quantize_config.json" ]
	conv --model-path "$F/llgptq" --output-dir "$O" --quant-format gptq --quiet
	quant_ok "$F/llgptq.raw" "$O"
	[ "$(meta "$O" 'm["quant"]["type"], "blk.0.attn_q.perm" in [t["name"] for t in m["tensors"]]')" = "('q4g128', False)" ]
}

@test "GPTQ 8-bit symmetric: q8, exact but for -128 steps stored as -127" {
	run conv --model-path "$F/qw8" --output-dir "$O"
	[ "$status" -eq 0 ]
	[[ "$output" == *"GPTQ 8-bit weights of -128 steps were stored as -127"* ]]
	quant_ok "$F/qw8.raw" "$O"
	[ "$(meta "$O" 'm["quant"]["type"]')" = q8g32 ]
}

@test "GPTQ 8-bit asymmetric act-order: re-quantized to q8 with a warning" {
	run conv --model-path "$F/v2g8a" --output-dir "$O"
	[ "$status" -eq 0 ]
	[[ "$output" == *"warning: "*" GPTQ 8-bit groups were asymmetric and were re-quantized"* ]]
	quant_ok "$F/v2g8a.raw" "$O"
}

@test "--quant-format must agree with the checkpoint" {
	refuse_fmt() { # SRC FORMAT WHAT
		run conv --model-path "$1" --output-dir "$O" --quant-format "$2" --quiet
		echo "$output"
		[ "$status" -eq 1 ] && [[ "$output" == *"$3"* ]] && [ ! -e "$O" ]
	}
	refuse_fmt "$F/v2awq" gptq "--quant-format gptq, but config.json: quantization_config describes awq"
	refuse_fmt "$F/v2awq" none "--quant-format none, but"
	refuse_fmt "$F/llama" awq "--quant-format awq, but no quantization settings found"
	conv --model-path "$F/llama" --output-dir "$O" --quant-format none --quiet
}

# ---- --inspect and --verify ---------------------------------------------------------

@test "--inspect SRC lists every tensor with dtype, shape and bytes" {
	run conv --inspect "$F/v3gptq"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "checkpoint: $F/v3gptq" ]
	[ "${lines[2]}" = "architecture: deepseek_v3 -> deepseek2, 3 layers, n_embd 128, n_vocab 384, n_head 4, n_head_kv 4, MLA q_lora_rank 128 kv_lora_rank 128, MoE 8 experts (2 used, 1 shared)" ]
	[ "${lines[3]}" = "quantization: gptq gptq, 4 bits, group size 64, sym, desc_act (config.json: quantization_config)" ]
	# the table is the header's, line for line
	want=$($PY -c 'import json,sys
b = open(sys.argv[1], "rb").read(); n = int.from_bytes(b[:8], "little")
h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
for k, v in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"]):
    print("%s\t%s\t[%s]\t%d" % (k, v["dtype"], ", ".join(map(str, v["shape"])), v["data_offsets"][1] - v["data_offsets"][0]))' "$F/v3gptq/model.safetensors")
	[ "${lines[4]}" = "mtp: 1 layer, model.layers.3.* (140 tensors)" ]
	[ "$(printf '%s\n' "${lines[@]:7}")" = "$want" ]
	[ "${lines[5]}" = "tensors: $(echo "$want" | wc -l), $(echo "$want" | awk -F'\t' '{s += $4} END {print s}') bytes" ]
	[ "${lines[6]}" = "$(printf 'name\tdtype\tshape\tbytes')" ]
}

@test "--inspect DST lists the model's tensors with offsets and CRC-32s" {
	conv --model-path "$F/v2awq" --output-dir "$O" --quiet
	run conv --inspect "$O"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "model: $O" ]
	[ "${lines[3]}" = "quantization: awq, 4 bits, group size 64, type q4g64" ]
	[ "${lines[4]}" = "mtp: none" ]
	[ "$(printf '%s\n' "${lines[@]:7}" | cut -f1,2,4,5,6)" = "$(meta "$O" '"\n".join("%s\t%s\t%d\t%d\t%s" % (t["name"], t["type"], t["size"], t["offset"], t["crc32"]) for t in m["tensors"])')" ]
}

@test "--verify catches a flipped byte and names the tensor" {
	conv --model-path "$F/v2awq" --output-dir "$O" --quiet
	off=$(meta "$O" '[t["offset"] for t in m["tensors"] if t["name"] == "blk.1.ffn_up_exps"][0]')
	printf '\x5a' | dd of="$O/model.bin" bs=1 seek=$((off + 1000)) conv=notrunc status=none
	run conv --verify "$O"
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == "ds-convert: $O/model.bin: tensor blk.1.ffn_up_exps: CRC-32 "*", model.meta says "* ]]
	run conv --verify "$F/llama"
	[ "$status" -eq 1 ]
}

# ---- archives ---------------------------------------------------------------------------

@test "archives: tar, tar.gz, tar.zst and zip give the same model as the directory" {
	conv --model-path "$F/v3awq" --output-dir "$O" --quiet
	a=$T
	tar -C "$F" -cf "$a/c.tar" v3awq
	tar -C "$F" -czf "$a/c.tar.gz" v3awq
	tar -C "$F/v3awq" --zstd -cf "$a/c.tar.zst" .
	(cd "$F/v3awq" && $PY -m zipfile -c "$a/c.zip" *)
	for x in c.tar c.tar.gz c.tar.zst c.zip; do
		conv --model-path "$a/$x" --output-dir "$a/m-$x" --quiet
		cmp "$O/model.bin" "$a/m-$x/model.bin"
		! compgen -G "$a/m-$x.tmp-*"
	done
	run conv --inspect "$a/c.tar.zst"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "checkpoint: $a/c.tar.zst" ]
}

@test "archives: path traversal, links out and archives without a config are refused" {
	a=$T
	$PY - "$a" <<-'EOF'
	import io, sys, tarfile
	d = sys.argv[1]
	def mk(name, members):
	    with tarfile.open(d + "/" + name, "w") as t:
	        for n, kind, val in members:
	            i = tarfile.TarInfo(n)
	            if kind == "file":
	                i.size = len(val); t.addfile(i, io.BytesIO(val))
	            elif kind == "sym":
	                i.type = tarfile.SYMTYPE; i.linkname = val; t.addfile(i)
	            else:
	                i.type = tarfile.LNKTYPE; i.linkname = val; t.addfile(i)
	mk("dots.tar", [("config.json", "file", b"{}"), ("../evil", "file", b"x")])
	mk("abs.tar", [("/tmp/evil", "file", b"x")])
	mk("sym.tar", [("config.json", "file", b"{}"), ("model.safetensors", "sym", "../../etc/passwd")])
	mk("hard.tar", [("config.json", "file", b"{}"), ("x", "hard", "/etc/passwd")])
	mk("noconf.tar", [("a/b.txt", "file", b"x"), ("c/d.txt", "file", b"y")])
	EOF
	refuse "$a/dots.tar" "dots.tar: entry \"../evil\": unsafe path"
	refuse "$a/abs.tar" "abs.tar: entry \"/tmp/evil\": unsafe path"
	refuse "$a/sym.tar" "sym.tar: entry \"model.safetensors\": symbolic link to \"../../etc/passwd\" points outside"
	refuse "$a/hard.tar" "hard.tar: entry \"x\": hard links are not accepted"
	refuse "$a/noconf.tar" "noconf.tar: no config.json"
	echo garbage > "$a/bad.tar.gz"
	refuse "$a/bad.tar.gz" "bad.tar.gz"
	[ ! -e "$a/evil" ] && [ ! -e /tmp/evil ]
}

# ---- bad input ------------------------------------------------------------------------------

@test "a truncated safetensors file" {
	s=$(copy llama)
	truncate -s -10 "$s/model.safetensors"
	refuse "$s" "model.safetensors: tensor lm_head.weight: data ends at byte" "truncated"
}

@test "a header length past the end of the file, and over the limit" {
	s=$(copy llama)
	$PY tests/cli/helpers/st-edit.py "$s/model.safetensors" hlen 99999999
	refuse "$s" "model.safetensors: header length 99999999 past the end of the file"
	$PY tests/cli/helpers/st-edit.py "$s/model.safetensors" hlen 200000000
	refuse "$s" "header length 200000000 exceeds 100000000"
}

@test "overlapping data_offsets" {
	s=$(copy llama)
	$PY tests/cli/helpers/st-edit.py "$s/model.safetensors" set \
		model.layers.0.input_layernorm.weight data_offsets '[0, 256]'
	refuse "$s" "model.safetensors: tensor model.embed_tokens.weight: data_offsets [0,98304] overlap tensor model.layers.0.input_layernorm.weight"
}

@test "a tensor whose bytes disagree with its shape, and one of the wrong shape" {
	s=$(copy llama)
	$PY tests/cli/helpers/st-edit.py "$s/model.safetensors" set \
		model.layers.0.input_layernorm.weight shape '[64]'
	refuse "$s" "tensor model.layers.0.input_layernorm.weight: shape [64] of BF16 needs 128 bytes"
	rm -rf "$s"
	s=$(copy llama)
	$PY tests/cli/helpers/st-edit.py "$s/model.safetensors" set \
		model.layers.0.input_layernorm.weight shape '[2, 64]'
	refuse "$s" "model.safetensors: tensor model.layers.0.input_layernorm.weight: shape [2, 64], the llama architecture needs [128]"
	rm -rf "$s"
	s=$(copy llama)
	edit_json "$s/config.json" 'd["intermediate_size"] = 512'
	refuse "$s" "tensor model.layers.0.mlp.gate_proj.weight: shape [256, 128], the llama architecture needs [512, 128]"
}

@test "AWQ and GPTQ tensors inconsistent with bits and group size" {
	s=$(copy v2awq)
	edit_json "$s/config.json" 'd["quantization_config"]["group_size"] = 32'
	refuse "$s" "tensor model.layers.0.self_attn.q_proj.qzeros: shape [2, 32], AWQ GEMM needs [4, 32]"
	rm -rf "$s"
	s=$(copy llgptq)
	edit_json "$s/quantize_config.json" 'd["bits"] = 8'
	refuse "$s" "tensor model.layers.0.self_attn.q_proj.qweight: shape [16, 128], GPTQ needs [32, 128]"
}

@test "missing and insane config fields" {
	s=$(copy llama)
	edit_json "$s/config.json" 'del d["hidden_size"]'
	refuse "$s" "config.json: hidden_size missing"
	edit_json "$s/config.json" 'd["hidden_size"] = 128; d["num_key_value_heads"] = 3'
	refuse "$s" "config.json: num_key_value_heads 3 does not divide num_attention_heads 4"
	edit_json "$s/config.json" 'd["num_key_value_heads"] = 2; d["rope_scaling"] = {"rope_type": "longrope", "factor": 2}'
	refuse "$s" "config.json: rope_scaling.type \"longrope\" is not supported"
	echo '{"model_type": ' > "$s/config.json"
	refuse "$s" "config.json: line"
	rm "$s/config.json"
	refuse "$s" "config.json"
}

@test "an unknown model_type is named" {
	s=$(copy llama)
	edit_json "$s/config.json" 'd["model_type"] = "mistral"'
	refuse "$s" "config.json: model_type \"mistral\" is not supported (llama, qwen2, deepseek_v2, deepseek_v3)"
}

@test "unsupported quantization variants are refused by name" {
	s=$(copy v2awq)
	for v in gemv gemv_fast marlin; do
		edit_json "$s/config.json" "d['quantization_config']['version'] = '$v'"
		refuse "$s" "AWQ version \"$v\" is not supported"
	done
	edit_json "$s/config.json" 'd["quantization_config"] = {"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}'
	refuse "$s" "fp8 fmt \"e5m2\" is not supported (e4m3)"
	edit_json "$s/config.json" 'd["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic"}'
	refuse "$s" "fp8 weight_block_size missing (only block-scaled FP8 is supported)"
	edit_json "$s/config.json" 'd["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128], "activation_scheme": "static"}'
	refuse "$s" "fp8 activation_scheme other than \"dynamic\" is not supported"
	edit_json "$s/config.json" 'd["quantization_config"] = {"quant_method": "exl2", "bits": 4}'
	refuse "$s" "quant_method \"exl2\" is not supported"
	rm -rf "$s"
	s=$(copy llgptq)
	edit_json "$s/quantize_config.json" 'd["bits"] = 3'
	refuse "$s" "quantize_config.json: GPTQ 3-bit is not supported"
	edit_json "$s/quantize_config.json" 'd["bits"] = 4; d["checkpoint_format"] = "marlin"'
	refuse "$s" "GPTQ Marlin format is not supported"
	edit_json "$s/quantize_config.json" 'd["checkpoint_format"] = "gptq"; d["dynamic"] = {"-:.*mlp.*": {}}'
	refuse "$s" "GPTQ \"dynamic\" per-module overrides are not supported"
}

@test "fp8 tensors without settings, a missing tensor, an unexpected tensor" {
	s=$(copy llama)
	$PY tests/cli/helpers/st-edit.py "$s/model.safetensors" set \
		model.layers.0.input_layernorm.weight dtype '"F8_E4M3"'
	$PY tests/cli/helpers/st-edit.py "$s/model.safetensors" set \
		model.layers.0.input_layernorm.weight shape '[256]'
	refuse "$s" "tensor model.layers.0.input_layernorm.weight: dtype F8_E4M3 is not F32, F16 or BF16 (an FP8 tensor where none is expected"
	rm -rf "$s"
	s=$(copy llama)
	edit_json "$s/config.json" 'd["num_hidden_layers"] = 3'
	refuse "$s" "model.layers.2.input_layernorm.weight: missing from the checkpoint"
	edit_json "$s/config.json" 'd["num_hidden_layers"] = 1'
	refuse "$s" "model.safetensors: tensor model.layers.1.input_layernorm.weight: not part of the llama architecture"
	rm -rf "$s"
	s=$(copy llama)
	edit_json "$s/config.json" 'd["tie_word_embeddings"] = True'
	refuse "$s" "lm_head.weight present but tie_word_embeddings is true"
}

@test "a sharded checkpoint whose index disagrees with its shards" {
	s=$(copy llama_f16)
	edit_json "$s/model.safetensors.index.json" 'd["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors"'
	refuse "$s" "tensor model.norm.weight"
	edit_json "$s/model.safetensors.index.json" 'd["weight_map"]["x"] = "../../etc/passwd"'
	refuse "$s" "model.safetensors.index.json: tensor x: shard is not a file name"
}

# ---- the output directory ---------------------------------------------------------------

@test "an existing DST needs --force; a directory that is not a model is never replaced" {
	conv --model-path "$F/llama" --output-dir "$O" --quiet
	before=$(cat "$O/model.meta")
	refuse_exists() {
		run conv --model-path "$F/qwen" --output-dir "$O" --quiet
		[ "$status" -eq 1 ] && [[ "$output" == *"$O: already exists (--force replaces it)"* ]]
	}
	refuse_exists
	[ "$(cat "$O/model.meta")" = "$before" ]
	conv --model-path "$F/qwen" --output-dir "$O" --force --quiet
	float_ok "$F/qwen" "$O"
	! compgen -G "$O.tmp-*"
	mkdir "$O.home" && touch "$O.home/precious"
	run conv --model-path "$F/qwen" --output-dir "$O.home" --force --quiet
	[ "$status" -eq 1 ]
	[[ "$output" == *"exists and is not a ds model directory; not replacing it"* ]]
	[ -e "$O.home/precious" ]
}

@test "a stale DST.tmp-* left by a killed run is removed by the next run" {
	mkdir "$O.tmp-Ab12cd" && touch "$O.tmp-Ab12cd/model.bin"
	touch -d '1 hour ago' "$O.tmp-Ab12cd"
	mkdir "$O.tmp-mine"
	conv --model-path "$F/llama" --output-dir "$O" --quiet
	[ ! -e "$O.tmp-Ab12cd" ]
	[ -d "$O.tmp-mine" ]  # not a name ds-convert makes
}

@test "SIGTERM and SIGINT remove the temporaries and leave no DST" {
	gen --arch llama --hidden 512 --ff 2048 --layers 4 --heads 8 --kv-heads 8 \
		--out "$T/big"
	for sig in TERM INT; do
		rm -rf "$O"
		"$DS_BIN/ds-convert" --model-path "$T/big" --output-dir "$O" \
			--quantize q4 --threads 1 --quiet &
		pid=$!
		# stop it as soon as its temporary exists, signal, let it go on
		# (a run that ended first fails at kill -STOP, it does not hang)
		until compgen -G "$O.tmp-*" >/dev/null; do
			kill -0 $pid 2>/dev/null || break
		done
		kill -STOP $pid
		kill -$sig $pid
		kill -CONT $pid
		rc=0
		wait $pid || rc=$?
		echo "$sig: $rc"
		[ "$rc" -eq $((128 + $(kill -l $sig))) ]
		[ ! -e "$O" ]
		! compgen -G "$O.tmp-*"
	done
}

@test "progress: a bar on a terminal, one summary line otherwise, nothing with --quiet" {
	run conv --model-path "$F/v2awq" --output-dir "$O"
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "${lines[0]}" =~ ^ds-convert:\ [0-9]+\ tensors,\ [0-9.]+\ MB\ in\ [0-9.]+\ s\ \([0-9]+\ MB/s\)$ ]]
	run script -qec "$DS_BIN/ds-convert --model-path $F/v2awq --output-dir $O.tty" /dev/null
	[ "$status" -eq 0 ]
	[[ "$output" == *"ds-convert ["*"] "*" tensors, "*" MB/s, ETA "* ]]
	run conv --model-path "$F/v2awq" --output-dir "$O.q" --quiet
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "ds-model(5) lists exactly the hparams keys a conversion writes" {
	conv --model-path "$F/v3" --output-dir "$O" --quiet
	doc=$(awk '/^\.Ss Hyper-parameters/ { on = 1; next } /^\.Ss / { on = 0 }
		on && /^\.It Cm / { sub(/^\.It Cm /, ""); gsub(/ , /, "\n"); print }' \
		man/ds-model.5 | sort)
	[ -n "$doc" ]
	[ "$doc" = "$(meta "$O" '"\n".join(sorted(m["hparams"]))')" ]
	rdoc=$(awk '/^\.It Cm rope_scaling/ { on = 1; next } on && /^\.It / { on = 0 }
		on && /^\.Cm / { sub(/^\.Cm /, ""); sub(/ [,.;()]*$/, ""); gsub(/ , /, "\n"); print }' \
		man/ds-model.5 | sort -u)
	[ "$rdoc" = "$(meta "$O" '"\n".join(sorted(m["hparams"]["rope_scaling"]))')" ]
}

# ---- FP8 (DeepSeek-V3's block-scaled e4m3fn) --------------------------------

# the FP8 fixture and its twin already dequantized to F32, made once
fp8_fixtures() {
	[ -d "$F/v3fp8" ] && return 0
	gen --arch deepseek_v3 --quant fp8 --shards 2 --seed 7 --out "$F/v3fp8"
	gen --arch deepseek_v3 --quant fp8 --dequant --seed 7 --out "$F/v3fp8.f32"
}

logits() { # MODEL OUT
	"$DS_BIN/ds-run" -m "$1" -p "The quick brown fox jumps" -n 0 --logits-out "$2" 2>/dev/null
}

@test "FP8 q8 and q4: the same model.bin and logits as its twin dequantized to F32" {
	fp8_fixtures
	for q in q8 q4; do
		conv --model-path "$F/v3fp8" --output-dir "$O.$q" --quantize $q --quiet
		conv --model-path "$F/v3fp8.f32" --output-dir "$O.f32.$q" --quantize $q --quiet
		cmp "$O.$q/model.bin" "$O.f32.$q/model.bin"
		logits "$O.$q" "$T/l.$q"
		logits "$O.f32.$q" "$T/l.f32.$q"
		[ -s "$T/l.$q" ]
		cmp "$T/l.$q" "$T/l.f32.$q"
	done
	[ "$(meta "$O.q8" 'm["quant"]["source"], m["quant"]["type"]')" = "('fp8', 'q8g32')" ]
	[ "$(meta "$O.q4" '[t["type"] for t in m["tensors"] if t["name"] in ("output", "blk.1.ffn_up_exps")]')" = "['q4g32', 'q8g32']" ]
	# the default for an FP8 checkpoint is q8
	conv --model-path "$F/v3fp8" --output-dir "$O.default" --quiet
	cmp "$O.default/model.bin" "$O.q8/model.bin"
}

@test "FP8 --quantize keep: bf16 of the f32 products, as fp8_cast_bf16.py makes" {
	fp8_fixtures
	conv --model-path "$F/v3fp8" --output-dir "$O" --quantize keep --quiet
	[ "$(meta "$O" 'm["quant"]')" = "{'source': 'fp8', 'bits': 0, 'group_size': 0, 'type': 'bf16'}" ]
	run $PY -c 'import sys, glob, numpy as np
sys.path.insert(0, "scripts"); import ckpt
src = {}
for f in glob.glob(sys.argv[1] + "/*.safetensors"):
    src.update(ckpt.read_safetensors(f))
meta, ts = ckpt.read_ds_model(sys.argv[2])
n = 0
for name, (e, data) in ts.items():
    if name != "blk.0.attn_kv_a" and name != "blk.2.ffn_down_exps":
        continue
    got = ckpt.ds_dequant(e, data)
    ref = src["model.layers.0.self_attn.kv_a_proj_with_mqa.weight"] if name == "blk.0.attn_kv_a" \
        else src["model.layers.2.mlp.experts.5.down_proj.weight"]
    got = got if got.ndim == 2 else got[5]
    want = ckpt.bf16_decode(ckpt.bf16_encode(ref))
    assert e["type"] == "bf16" and np.array_equal(got, want), name
    n += 1
print(n)' "$F/v3fp8.f32" "$O"
	echo "$output"
	[ "$output" = 2 ]
}

@test "FP8: the MTP layer is converted, shared or its own, and left out when absent" {
	fp8_fixtures
	run conv --inspect "$F/v3fp8"
	[ "${lines[3]}" = "quantization: fp8 e4m3, blocks of [128, 128] (config.json: quantization_config)" ]
	[ "${lines[4]}" = "mtp: 1 layer, model.layers.3.* (76 tensors)" ]
	conv --model-path "$F/v3fp8" --output-dir "$O" --quiet
	run conv --inspect "$O"
	[ "${lines[4]}" = "mtp: 1 layer, blk.3.* and mtp.* (21 tensors); embedding token_embd (shared), head output (shared)" ]
	[ "$(meta "$O" '[t["type"] for t in m["tensors"] if t["name"] in ("mtp.eh_proj", "blk.3.attn_kv_b", "mtp.enorm")]')" = "['f32', 'q8g32', 'q8g32']" ]
	run conv --verify "$O"
	[[ "$output" == *": 70 tensors, "* ]]
	gen --arch deepseek_v3 --quant fp8 --mtp own --out "$T/own"
	conv --model-path "$T/own" --output-dir "$O.own" --quiet
	[ "$(meta "$O.own" 'm["hparams"]["mtp_shares_embd"], m["hparams"]["mtp_shares_head"], [t["type"] for t in m["tensors"] if t["name"] in ("mtp.embd", "mtp.head")]')" = "(0, 0, ['bf16', 'q8g32'])" ]
	gen --arch deepseek_v3 --quant fp8 --mtp absent --seed 7 --out "$T/absent"
	run conv --model-path "$T/absent" --output-dir "$O.absent"
	[ "$status" -eq 0 ]
	[[ "$output" == *"note: config.json names a multi-token-prediction layer that the checkpoint does not carry"* ]]
	[ "$(meta "$O.absent" 'm["hparams"]["n_mtp"], len([t for t in m["tensors"] if t["name"].startswith(("mtp.", "blk.3."))])')" = "(0, 0)" ]
	gen --arch deepseek_v3 --mtp none --out "$T/none"
	conv --model-path "$T/none" --output-dir "$O.none" --quiet
	[ "$(meta "$O.none" 'm["hparams"]["n_mtp"]')" = 0 ]
	# ds-run runs a model with an MTP layer without it
	logits "$O" "$T/l.mtp"
	logits "$O.absent" "$T/l.nomtp"
	cmp "$T/l.mtp" "$T/l.nomtp"
}

@test "FP8: scale_inv missing, misshapen, of another dtype or not finite is refused" {
	fp8_fixtures
	wn=model.layers.0.self_attn.kv_a_proj_with_mqa.weight
	f=model-00001-of-00002.safetensors
	s=$(copy v3fp8)
	$PY tests/cli/helpers/st-edit.py "$s/$f" rename ${wn}_scale_inv ${wn}_scale_inX
	edit_json "$s/model.safetensors.index.json" "m = d['weight_map']; m['${wn}_scale_inX'] = m.pop('${wn}_scale_inv')"
	refuse "$s" "$f: tensor $wn: F8_E4M3 without its ${wn}_scale_inv"
	rm -rf "$s"; s=$(copy v3fp8)
	$PY tests/cli/helpers/st-edit.py "$s/$f" set ${wn}_scale_inv shape '[1,2]'
	refuse "$s" "$f: tensor ${wn}_scale_inv: shape [1, 2], but blocks of [128, 128] (weight_block_size in config.json: quantization_config) over $wn [160, 128] need [2, 1]"
	rm -rf "$s"; s=$(copy v3fp8)
	$PY tests/cli/helpers/st-edit.py "$s/$f" set ${wn}_scale_inv dtype '"BF16"'
	$PY tests/cli/helpers/st-edit.py "$s/$f" set ${wn}_scale_inv shape '[2,2]'
	refuse "$s" "tensor ${wn}_scale_inv: dtype BF16, FP8 block scales must be F32"
	rm -rf "$s"; s=$(copy v3fp8)
	$PY tests/cli/helpers/st-edit.py "$s/$f" poke ${wn}_scale_inv 4 0000807f
	refuse "$s" "$f: tensor $wn: scale of block [1, 0] is not finite"
}

@test "FP8: NaN codes, a block size other than the config's, FP8 where none belongs" {
	fp8_fixtures
	wn=model.layers.2.mlp.experts.6.up_proj.weight
	f=$(grep -o "\"$wn\": \"[^\"]*\"" "$F/v3fp8/model.safetensors.index.json" | cut -d'"' -f4)
	s=$(copy v3fp8)
	# row 37, column 100 of [128, 128]
	$PY tests/cli/helpers/st-edit.py "$s/$f" poke $wn $((37 * 128 + 100)) ff
	refuse "$s" "$f: tensor $wn: NaN code 0xff at [37, 100]"
	rm -rf "$s"; s=$(copy v3fp8)
	edit_json "$s/config.json" 'd["quantization_config"]["weight_block_size"] = [64, 128]'
	refuse "$s" "shape [1, 1], but blocks of [64, 128] (weight_block_size in config.json: quantization_config) over model.layers.0.self_attn.q_a_proj.weight [128, 128] need [2, 1]"
	rm -rf "$s"; s=$(copy v3fp8)
	r=model.layers.1.mlp.gate.weight
	f=$(grep -o "\"$r\": \"[^\"]*\"" "$F/v3fp8/model.safetensors.index.json" | cut -d'"' -f4)
	$PY tests/cli/helpers/st-edit.py "$s/$f" set $r dtype '"F8_E4M3"'
	$PY tests/cli/helpers/st-edit.py "$s/$f" set $r shape '[16,128]'
	refuse "$s" "$f: tensor $r: F8_E4M3: an FP8 tensor where none is expected"
	rm -rf "$s"; s=$(copy v3fp8)
	edit_json "$s/config.json" 'del d["quantization_config"]'
	refuse "$s" "tensor model.layers.0.self_attn.q_a_proj.weight: F8_E4M3, but the checkpoint has no FP8 quantization settings"
	run conv --model-path "$F/v3fp8" --output-dir "$O" --quant-format awq --quiet
	[ "$status" -eq 1 ]
	[[ "$output" == *"--quant-format awq, but config.json: quantization_config describes fp8 quantization"* ]]
}

@test "FP8: shards of FP8 and of converted weights mixed are refused" {
	fp8_fixtures
	# layer 1 from the F32 twin (as a partial BF16 cast leaves it), the
	# rest FP8
	$PY -c 'import sys, glob, json, shutil
sys.path.insert(0, "scripts"); import ckpt
a, b, out = sys.argv[1:4]
shutil.copytree(a, out)
for f in glob.glob(out + "/*.safetensors*"):
    __import__("os").remove(f)
ta, tb = {}, ckpt.read_safetensors(b + "/model.safetensors")
for f in sorted(glob.glob(a + "/*.safetensors")):
    ta.update(ckpt.read_safetensors(f))
ents = []
for k, v in ta.items():
    if k.startswith("model.layers.1.") and k.endswith("_scale_inv"):
        continue
    if k.startswith("model.layers.1.") and v.dtype.itemsize == 1:
        ents.append(ckpt.Entry(k, "F32", v.shape, tb[k]))
    else:
        dt = {1: "F8_E4M3", 4: "F32"}.get(v.dtype.itemsize, "BF16")
        ents.append(ckpt.Entry(k, dt, v.shape, v if dt != "BF16" else ckpt.bf16_encode(v)))
ckpt.write_checkpoint(out, ents, 2)' "$F/v3fp8" "$F/v3fp8.f32" "$T/mixed"
	refuse "$T/mixed" "tensor model.layers.1.self_attn.q_a_proj.weight: F32 in an FP8 checkpoint, whose decoder layers' linear weights are all F8_E4M3 (shards of FP8 and of converted weights mixed?)"
}

@test "gen-fixture's FP8 encoder: every code round-trips, ties go to even, 448 saturates" {
	run $PY -c 'import sys, numpy as np
sys.path.insert(0, "scripts"); import ckpt
c = np.arange(256, dtype=np.uint8)
v = ckpt.fp8_decode(c)
e, m = (c >> 3) & 15, c & 7
want = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e.astype(int) - 7))
want = np.where(c & 0x80, -want, want)
fin = (c & 0x7F) != 0x7F
assert np.isnan(v[~fin]).all() and (v[fin] == want[fin]).all()
assert (ckpt.fp8_encode(v[fin]) == c[fin]).all()
pos = np.unique(v[fin & (v >= 0)])
mid = ((pos[:-1].astype(np.float64) + pos[1:]) / 2).astype(np.float32)
lo, hi = ckpt.fp8_encode(pos[:-1]), ckpt.fp8_encode(pos[1:])
assert (ckpt.fp8_encode(mid) == np.where(lo % 2 == 0, lo, hi)).all()
assert (ckpt.fp8_encode(np.float32([500, -1e30, 449])) == [0x7E, 0xFE, 0x7E]).all()
W = np.random.default_rng(1).standard_normal((300, 200)).astype(np.float32)
q, s = ckpt.fp8_quantize(W)
assert s.shape == (3, 2) and np.abs(ckpt.fp8_decode(q)).max() == 448
d = ckpt.fp8_dequant(q, s)
assert np.abs(d - W).max() <= np.abs(W).max() / 16
print("ok")'
	echo "$output"
	[ "$output" = ok ]
}
