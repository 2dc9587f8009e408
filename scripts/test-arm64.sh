#!/bin/sh
# test-arm64.sh - the AArch64 build's tests under qemu-user (make test-arm64).
# Usage: scripts/test-arm64.sh UNIT_DIR ARM_BIN X86_BIN [kernels]
#   UNIT_DIR  the cross-built unit tests (build-arm64/tests)
#   ARM_BIN   the cross-built programs (bin-arm64)
#   X86_BIN   this machine's programs (bin): its ds-convert writes the
#             models the arm64 ds-run runs, unchanged
#   kernels   only step 1 (what CI runs)
# Environment: QEMU, the emulator (default qemu-aarch64; empty on an
# AArch64 machine, where each step runs on the real CPU only).
#
#   1. test_kernels on three emulated CPUs, every ISA each has against
#      scalar.c: cortex-a53 (neon), neoverse-n1 (neon, dotprod), max
#      (neon, dotprod, dotprod+i8mm)
#   2. the other unit tests, on -cpu max
#   3. ds-run.bats' golden-logit lines as they are (the same cases, the
#      same tolerances), by the arm64 ds-run on the models the x86
#      ds-convert wrote, under each DS_ISA of -cpu max (a line that sets
#      DS_ISA under that one only); ds-run --verbose names the kernels
#   4. ds-convert on arm64 writes the x86 one's model byte for byte
#   5. q4 and q8 models: the same logits byte for byte on neon, dotprod
#      and i8mm (every path takes the same float steps: neon_q.h)
# qemu runs the programs with the multiarch arm64 libraries
# (scripts/deps.sh --arm64), not with -L /usr/aarch64-linux-gnu: with the
# cross toolchain's own libc, pthread_create hung under Debian's qemu 7.2.
# The last line is "N passed, N failed"; the status is 1 if any failed.
set -u
unit=${1:?usage: scripts/test-arm64.sh UNIT_DIR ARM_BIN X86_BIN [kernels]}
abin=${2:?} xbin=${3:?} only=${4:-}
: "${QEMU=qemu-aarch64}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
G=testdata/golden
CMP="/usr/bin/python3 tests/cli/cmp-logits.py"
pass=0 fail=0 skip=0

# run CPU PROGRAM ARGS...: PROGRAM on the emulated CPU (the real one
# without QEMU)
run() {
	cpu=$1
	shift
	if [ -n "$QEMU" ]; then
		$QEMU -cpu "$cpu" "$@"
	else
		"$@"
	fi
}

ok() { pass=$((pass + 1)); echo "ok - $*"; }
bad() { fail=$((fail + 1)); echo "not ok - $*"; }

# unit CPU TEST: a TAP test binary, its lines prefixed with its name
unit() {
	name=$(basename "$2")
	DS_TEST_EXEC="${QEMU:+$QEMU -cpu $1}" run "$1" "$2" >"$T/log" 2>&1
	rc=$?
	p=$(grep -c '^ok ' "$T/log")
	s=$(grep -c '^ok .*# [Ss][Kk][Ii][Pp]' "$T/log")
	f=$(grep -c '^not ok ' "$T/log")
	pass=$((pass + p - s)) skip=$((skip + s)) fail=$((fail + f))
	if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
		bad "$name ($1) exited with status $rc"
	fi
	sed -n "s/^\(not \)\{0,1\}ok [0-9]* - /&$name ($1): /p; /^# ISA/p; /^#   /p" "$T/log"
}

# ---- 1. the kernels on each emulated CPU ----
cpus="cortex-a53 neoverse-n1 max"
[ -n "$QEMU" ] || cpus=native
for cpu in $cpus; do
	unit "$cpu" "$unit/test_kernels"
done
if [ "$only" = kernels ]; then
	echo "$pass passed, $fail failed"
	[ $fail -eq 0 ]
	exit
fi

# ---- 2. the other unit tests ----
cpu=max
[ -n "$QEMU" ] || cpu=native
for t in "$unit"/test_*; do
	[ -x "$t" ] && [ "$(basename "$t")" != test_kernels ] && unit "$cpu" "$t"
done

# ---- 3. golden logits ----
isas="scalar neon dotprod i8mm"
[ -n "$QEMU" ] || isas=$(for i in scalar neon dotprod i8mm; do
	DS_ISA=$i "$abin"/ds-run --help >/dev/null 2>&1 && echo $i; done)
vocab() {
	/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hparams"]["n_vocab"])' "$1/model.meta"
}
# convert CASE: $T/golden-CASE by the x86 ds-convert (CASE@q8: --quantize q8)
convert() {
	[ -d "$T/golden-$1" ] && return 0
	case $1 in
	*@q8) "$xbin"/ds-convert --model-path "$G/${1%@q8}" --output-dir "$T/golden-$1" \
		--quantize q8 --quiet ;;
	*) "$xbin"/ds-convert --model-path "$G/$1" --output-dir "$T/golden-$1" --quiet ;;
	esac
}
# golden ISA CASE TOL FLIPS [ds-run options]: one line of ds-run.bats
golden() {
	isa=$1 n=$2 tol=$3 flips=$4 g=$G/${2%@*}
	shift 4
	if ! convert "$n"; then
		bad "golden $n: ds-convert (x86)"
		return
	fi
	if ! DS_ISA=$isa run max "$abin"/ds-run -m "$T/golden-$n" --ids -n 0 --verbose \
		--logits-out "$T/$n.f32" "$@" <"$g/prompt.ids" >/dev/null 2>"$T/err"; then
		bad "golden $n ($isa): ds-run failed: $(tail -1 "$T/err")"
		return
	fi
	name=$(sed -n 's/^ds-run: kernels \([^,]*\),.*/\1/p' "$T/err")
	case "$isa:$name" in
	scalar:scalar | neon:neon | dotprod:dotprod | i8mm:dotprod+i8mm) ;;
	*) bad "golden $n ($isa): ds-run --verbose named the kernels '$name'"; return ;;
	esac
	if out=$($CMP "$T/$n.f32" "$g/logits.f32" "$(vocab "$T/golden-$n")" "$tol" "$flips"); then
		ok "golden $n ($name, tol $tol $*): $out"
	else
		bad "golden $n ($name, tol $tol $*): $out"
	fi
}
grep '^@test "golden' tests/cli/ds-run.bats | sed 's/.*{ *\(.*\); *}$/\1/' >"$T/lines"
if [ ! -s "$T/lines" ]; then
	bad "no golden lines in tests/cli/ds-run.bats"
fi
while read -r line; do
	# shellcheck disable=SC2086
	set -- $line
	case $1 in
	DS_ISA=*) fixed=${1#DS_ISA=}; shift ;;
	*) fixed= ;;
	esac
	shift   # "golden"
	for isa in ${fixed:-$isas}; do
		golden "$isa" "$@"
	done
done <"$T/lines"

# ---- 4. the same model from ds-convert on either architecture ----
for n in llama-awq qwen2-gptq-actorder ds2-lite; do
	convert "$n" && run max "$abin"/ds-convert --model-path "$G/$n" \
		--output-dir "$T/arm-$n" --quiet || { bad "ds-convert (arm64) $n"; continue; }
	if cmp -s "$T/golden-$n/model.bin" "$T/arm-$n/model.bin" &&
	   cmp -s "$T/golden-$n/model.meta" "$T/arm-$n/model.meta" &&
	   cmp -s "$T/golden-$n/tokenizer.bin" "$T/arm-$n/tokenizer.bin"; then
		ok "ds-convert $n: the arm64 model is the x86 one, byte for byte"
	else
		bad "ds-convert $n: the arm64 model differs from the x86 one"
	fi
done

# ---- 5. q4 and q8: every AArch64 table's logits alike ----
"$xbin"/ds-convert --model-path "$G/llama" --output-dir "$T/llama-q4" --quantize q4 --quiet
for n in llama@q8 llama-q4:llama; do
	m=${n%%:*} ids=$G/${n##*:}
	case $n in *@q8) convert "$n"; ids=$G/llama ;; esac
	d=$T/golden-$m
	[ -d "$d" ] || d=$T/$m
	for isa in $isas; do
		[ "$isa" = scalar ] && continue
		DS_ISA=$isa run max "$abin"/ds-run -m "$d" --ids -n 3 --temp 0 \
			--logits-out "$T/same-$isa.f32" <"$ids/prompt.ids" >/dev/null 2>&1 ||
			bad "$m ($isa): ds-run failed"
	done
	for isa in $isas; do
		case $isa in scalar | neon) continue ;; esac
		if cmp -s "$T/same-neon.f32" "$T/same-$isa.f32"; then
			ok "$m: $isa's logits (prompt and decode) those of neon, byte for byte"
		else
			bad "$m: $isa's logits differ from neon's"
		fi
	done
done

[ $skip -gt 0 ] && echo "($skip skipped)"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
