#!/usr/bin/env bats
# man.bats - every manual page is lint-clean, and every program has one.

@test "mandoc -Tlint reports nothing on every page" {
	run mandoc -Tlint -W warning man/*.[1-8]
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "every program in cmd/ has a manual page" {
	for c in cmd/ds-*.c; do
		[ -e "$c" ] || continue
		n=$(basename "$c" .c)
		ls man/"$n".[1-8] >/dev/null
	done
}
