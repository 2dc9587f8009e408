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
	local src=$1
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
