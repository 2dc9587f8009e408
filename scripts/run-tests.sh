#!/bin/sh
# run-tests.sh - run every C unit test and bats test, print one summary.
# Usage: scripts/run-tests.sh UNIT_BIN_DIR
# Environment: DS_BIN (the programs' directory, default bin), passed to bats.
# The last line is "N passed, N failed"; the exit status is 1 if any failed.
set -u
unitdir=${1:-build/tests}
: "${DS_BIN:=bin}"
export DS_BIN
log=$(mktemp)
trap 'rm -f "$log"' EXIT INT TERM

pass=0 fail=0 skip=0
count() { # count TAP lines of $log; a crash or a missing plan is a failure
	p=$(grep -c '^ok ' "$log")
	s=$(grep -c '^ok .*# [Ss][Kk][Ii][Pp]' "$log")
	f=$(grep -c '^not ok ' "$log")
	pass=$((pass + p - s)) skip=$((skip + s)) fail=$((fail + f))
}

for t in "$unitdir"/test_*; do
	[ -x "$t" ] || continue
	name=$(basename "$t")
	"$t" >"$log" 2>&1
	rc=$?
	count
	if [ $rc -ne 0 ] && ! grep -q '^not ok ' "$log"; then
		fail=$((fail + 1))
		echo "not ok - $name exited with status $rc"
	fi
	sed "s/^\(not \)\{0,1\}ok [0-9]* - /&$name: /" "$log"
done

if ls tests/cli/*.bats >/dev/null 2>&1; then
	bats --tap tests/cli/*.bats >"$log" 2>&1
	rc=$?
	count
	if [ $rc -ne 0 ] && ! grep -q '^not ok ' "$log"; then
		fail=$((fail + 1))
		echo "not ok - bats exited with status $rc"
	fi
	cat "$log"
fi

[ $skip -gt 0 ] && echo "($skip skipped)"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
