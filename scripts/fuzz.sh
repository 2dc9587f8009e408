#!/bin/sh
# fuzz.sh - run the libFuzzer targets of tests/fuzz/ (built by `make fuzz`).
#
#   scripts/fuzz.sh seeds                   (re)make build/fuzz/seeds/ from testdata
#   scripts/fuzz.sh run TARGET SECONDS [LIBFUZZER-ARGS...]
#   scripts/fuzz.sh smoke SECONDS [JOBS]    every target, JOBS at a time
#                                           (default: one per CPU)
#   scripts/fuzz.sh merge TARGET DIR        the inputs of the corpus that add
#                                           coverage, copied into DIR
#   scripts/fuzz.sh campaign SECONDS [JOBS [TARGET...]]
#                                           every target (or those named) for
#                                           SECONDS, JOBS (default 3) at once,
#                                           under nice -n 19; see campaign()
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
: "${FUZZ_MALLOC_MB:=1024}" "${FUZZ_NICE:=0}" "${FUZZ_TIMEOUT:=10}"
BINDIR=$B/bin LOGDIR=$B/log

targets() {
	for f in tests/fuzz/fuzz_*.c; do
		t=${f#tests/fuzz/fuzz_}
		echo "${t%.c}"
	done
}

need_build() {
	[ -x "$BINDIR/fuzz_$1" ] || {
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
	hfconfig|qconfig|modelmeta|safetensors|servereq|stindex|tokjson|tokconfig|tuneplan)
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
	mkdir -p "$B/corpus/$t" "$B/crash/$t" "$LOGDIR"
	dirs="$B/corpus/$t"
	for d in "$B/seeds/$t" "tests/fuzz/corpus/$t" "tests/fuzz/regress/$t"; do
		[ -d "$d" ] && dirs="$dirs $d"
	done
	log=${RUN_LOG:-$LOGDIR/$t.log}
	before=$(ls "$B/crash/$t" | wc -l)
	# shellcheck disable=SC2046,SC2086
	nice -n "$FUZZ_NICE" "$BINDIR/fuzz_$t" -max_total_time="$secs" \
		-timeout="$FUZZ_TIMEOUT" -rss_limit_mb=4096 -malloc_limit_mb="$FUZZ_MALLOC_MB" \
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

# ---- campaign ----------------------------------------------------------------
#
# Each target runs for SECONDS in all: a run that stops early (a crash, a
# leak) is started again for the time left, at most 8 times, the corpus
# kept.  The campaign lives in build/fuzz/campaign/ (FUZZ_CAMPAIGN names
# another): the binaries copied there first (so `make fuzz` may rebuild
# during it), bin/, log/T.N.log per run, done/T, and summary, one line
# per target:
#   TARGET  SECONDS s  EXECS execs  EXEC/S exec/s  cov COV  ft FT  runs N  crashes N
# cov and ft are those of the last run's final line (libFuzzer's edge and
# feature counts).  Started again, it runs only the targets not done yet,
# including targets built since; remove the directory to start afresh.

# The run logs of target $1 -> execs (summed), cov, ft (last run).
camp_stats() {
	execs=0
	for l in "$C/log/$1".*.log; do
		e=$(sed -n 's/^stat::number_of_executed_units: *//p' "$l")
		execs=$((execs + ${e:-0}))
	done
	last=$(ls -tr "$C/log/$1".*.log | tail -n 1)
	line=$(grep -E '^#[0-9]+' "$last" | tail -n 1)
	cov=$(echo "$line" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
	ft=$(echo "$line" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
}

camp1() {
	# run1 sets t, secs and more: these names are camp1's own
	ct=$1 csecs=$2 cstart=$(date +%s) runs=0 found=0
	rm -f "$C/log/$ct".*.log
	while :; do
		left=$((csecs - ($(date +%s) - cstart)))
		[ "$left" -gt 5 ] && [ "$runs" -lt 8 ] || break
		runs=$((runs + 1))
		RUN_LOG=$C/log/$ct.$runs.log run1 "$ct" "$left" \
			>>"$C/runs" 2>>"$C/crashes" || found=$((found + 1))
	done
	execs=0 cov= ft=
	[ "$runs" -eq 0 ] || camp_stats "$ct"
	spent=$(($(date +%s) - cstart))
	printf '%-12s %5s s  %11s execs  %7s exec/s  cov %5s  ft %6s  runs %s  crashes %s\n' \
		"$ct" "$spent" "$execs" $((execs / (spent > 0 ? spent : 1))) \
		"${cov:-?}" "${ft:-?}" "$runs" "$found" >>"$C/summary"
	touch "$C/done/$ct"
}

# A worker: the next target nobody has claimed, until none is left.
camp_worker() {
	wsecs=$1
	shift
	while :; do
		next=
		for w in ${*:-$(targets)}; do
			[ -x "$B/bin/fuzz_$w" ] || continue
			mkdir "$C/claim/$w" 2>/dev/null || continue
			next=$w
			break
		done
		[ -n "$next" ] || return 0
		cp "$B/bin/fuzz_$next" "$BINDIR/"
		camp1 "$next" "$wsecs"
	done
}

campaign() {
	secs=$1 jobs=${2:-3}
	if [ $# -ge 2 ]; then shift 2; else shift; fi
	C=${FUZZ_CAMPAIGN:-$B/campaign}
	BINDIR=$C/bin LOGDIR=$C/log FUZZ_NICE=19
	[ "$FUZZ_TIMEOUT" -ge 30 ] || FUZZ_TIMEOUT=30  # slow under nice 19
	mkdir -p "$C/bin" "$C/log" "$C/claim" "$C/done"
	# claims of targets not done (an interrupted campaign) are dropped
	for d in "$C/claim"/*; do
		[ -d "$d" ] && [ ! -e "$C/done/${d##*/}" ] && rmdir "$d"
	done
	[ -d "$B/seeds" ] || seeds >/dev/null
	i=0
	while [ $i -lt "$jobs" ]; do
		camp_worker "$secs" "$@" &
		i=$((i + 1))
	done
	wait
	sort -o "$C/summary" "$C/summary"
	cat "$C/summary"
	[ ! -s "$C/crashes" ]
}

case ${1:-} in
campaign)
	[ $# -ge 2 ] || { echo "usage: fuzz.sh campaign SECONDS [JOBS [TARGET...]]" >&2; exit 2; }
	shift
	campaign "$@" ;;
seeds)
	seeds ;;
run)
	[ $# -ge 3 ] || { echo "usage: fuzz.sh run TARGET SECONDS" >&2; exit 2; }
	t=$2 s=$3
	shift 3
	run1 "$t" "$s" "$@" ;;
smoke)
	[ $# -eq 2 ] || [ $# -eq 3 ] || { echo "usage: fuzz.sh smoke SECONDS [JOBS]" >&2; exit 2; }
	[ -d "$B/seeds" ] || seeds >/dev/null
	# each target a `run` of its own; xargs exits non-zero if any found something
	targets | xargs -P "${3:-$(nproc)}" -I{} "$0" run {} "$2" ;;
merge)
	[ $# -eq 3 ] || { echo "usage: fuzz.sh merge TARGET DIR" >&2; exit 2; }
	need_build "$2"
	mkdir -p "$3"
	"$B/bin/fuzz_$2" -merge=1 "$3" "$B/corpus/$2" >"$B/log/$2.merge.log" 2>&1
	ls "$3" | wc -l ;;
*)
	sed -n '2,23s/^# \{0,1\}//p' "$0" >&2
	exit 2 ;;
esac
