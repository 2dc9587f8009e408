#!/bin/sh
# fuzz.sh - run the libFuzzer targets of tests/fuzz/ (built by `make fuzz`).
#
#   scripts/fuzz.sh seeds                   (re)make build/fuzz/seeds/ from testdata
#   scripts/fuzz.sh run TARGET SECONDS [LIBFUZZER-ARGS...]
#   scripts/fuzz.sh smoke SECONDS           every target, one after another
#   scripts/fuzz.sh merge TARGET DIR        the inputs of the corpus that add
#                                           coverage, copied into DIR
#
# A run reads the committed inputs (tests/fuzz/regress/T, tests/fuzz/corpus/T)
# and the seeds, and grows build/fuzz/corpus/T, kept between runs.  A crash,
# leak, timeout (10 s) or allocation over FUZZ_MALLOC_MB (default 1024) MB
# is written to build/fuzz/crash/T/; `make test` replays whatever is then
# saved in tests/fuzz/regress/T.  Each run prints one line:
#   TARGET  SECONDS s  EXECS execs  cov COV  ft FT  corpus N  crashes N
# and the log is build/fuzz/log/T.log.  The exit status is 1 if any run
# found something.  Environment: FUZZ_NICE (default 0) runs under nice -n.
set -eu
cd "$(dirname "$0")/.."
B=build/fuzz
: "${FUZZ_MALLOC_MB:=1024}" "${FUZZ_NICE:=0}"

targets() {
	for f in tests/fuzz/fuzz_*.c; do
		t=${f#tests/fuzz/fuzz_}
		echo "${t%.c}"
	done
}

need_build() {
	[ -x "$B/bin/fuzz_$1" ] || {
		echo "fuzz.sh: no $B/bin/fuzz_$1 (make fuzz)" >&2
		exit 2
	}
}

seeds() {
	[ -x bin/ds-convert ] || make --no-print-directory all
	/usr/bin/python3 scripts/fuzz-seeds.py "$B/seeds" bin
}

# dictionary: the JSON tokens for the targets that read JSON, plus the
# target's own words
dict() {
	d=$B/dict/$1.dict
	mkdir -p "$B/dict"
	: >"$d"
	case $1 in
	hfconfig|qconfig|modelmeta|safetensors|stindex|tokjson|tokconfig|tuneplan)
		cat tests/fuzz/dict/json.dict >>"$d" ;;
	esac
	[ -f "tests/fuzz/dict/$1.dict" ] && cat "tests/fuzz/dict/$1.dict" >>"$d"
	[ -s "$d" ] && echo "-dict=$d"
	return 0
}

run1() {
	t=$1 secs=$2
	shift 2
	need_build "$t"
	[ -d "$B/seeds" ] || seeds >/dev/null
	mkdir -p "$B/corpus/$t" "$B/crash/$t" "$B/log"
	dirs="$B/corpus/$t"
	for d in "$B/seeds/$t" "tests/fuzz/corpus/$t" "tests/fuzz/regress/$t"; do
		[ -d "$d" ] && dirs="$dirs $d"
	done
	log=$B/log/$t.log
	before=$(ls "$B/crash/$t" | wc -l)
	# shellcheck disable=SC2046,SC2086
	nice -n "$FUZZ_NICE" "$B/bin/fuzz_$t" -max_total_time="$secs" \
		-timeout=10 -rss_limit_mb=4096 -malloc_limit_mb="$FUZZ_MALLOC_MB" \
		-use_value_profile=1 -print_final_stats=1 \
		-artifact_prefix="$B/crash/$t/" $(dict "$t") "$@" $dirs \
		>"$log" 2>&1 || true
	after=$(ls "$B/crash/$t" | wc -l)
	last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
	ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
	printf '%-12s %5s s  %10s execs  cov %5s  ft %6s  corpus %5s  crashes %s\n' \
		"$t" "$secs" "${execs:-?}" "${cov:-?}" "${ft:-?}" \
		"$(ls "$B/corpus/$t" | wc -l)" $((after - before))
	if [ "$after" -gt "$before" ]; then
		grep -E 'ERROR|SUMMARY|invariant|==[0-9]+==' "$log" | head -n 5 >&2
		ls -t "$B/crash/$t" | head -n $((after - before)) |
			sed "s|^|  $B/crash/$t/|" >&2
		return 1
	fi
}

case ${1:-} in
seeds)
	seeds ;;
run)
	[ $# -ge 3 ] || { echo "usage: fuzz.sh run TARGET SECONDS" >&2; exit 2; }
	t=$2 s=$3
	shift 3
	run1 "$t" "$s" "$@" ;;
smoke)
	[ $# -eq 2 ] || { echo "usage: fuzz.sh smoke SECONDS" >&2; exit 2; }
	bad=0
	for t in $(targets); do
		run1 "$t" "$2" || bad=1
	done
	exit $bad ;;
merge)
	[ $# -eq 3 ] || { echo "usage: fuzz.sh merge TARGET DIR" >&2; exit 2; }
	need_build "$2"
	mkdir -p "$3"
	"$B/bin/fuzz_$2" -merge=1 "$3" "$B/corpus/$2" >"$B/log/$2.merge.log" 2>&1
	ls "$3" | wc -l ;;
*)
	sed -n '2,19s/^# \{0,1\}//p' "$0" >&2
	exit 2 ;;
esac
