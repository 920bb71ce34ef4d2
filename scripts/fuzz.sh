#!/usr/bin/env bash
# Runs every fuzz target of every module of the workspace (go.work) for
# FUZZTIME each (make fuzz).
#
# A finding fails the run: Go writes its input under testdata/fuzz/ and
# says "Failing input written to". One failure is not a finding: Go 1.26's
# fuzzing coordinator can report "context deadline exceeded" when -fuzztime
# ends while a worker is mid-call on a loaded machine (golang/go#75804,
# fixed in Go 1.27), with no input written. Such a target is run once more,
# and if it ends the same way again it is reported and not counted as a
# failure; any other failure fails the run.
set -uo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-20s}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# is_deadline_flake reports whether the output in $log is the coordinator's
# deadline race alone: the bare error, and nothing a finding prints.
is_deadline_flake() {
	grep -q '^    context deadline exceeded$' "$log" &&
		! grep -qE 'Failing input written to|panic:|_test\.go:[0-9]+:' "$log"
}

run() { # pkg target
	"$GO" test -run '^$' -fuzz "^$2\$" -fuzztime "$FUZZTIME" "$1" </dev/null 2>&1 | tee "$log"
}

flakes=0
# ./... alone is the root module's packages only, even in a workspace.
mapfile -t modules < <("$GO" list -m -f '{{.Dir}}/...')
for pkg in $("$GO" list "${modules[@]}"); do
	dir=$("$GO" list -f '{{.Dir}}' "$pkg")
	while read -r target; do
		echo "== $pkg $target"
		run "$pkg" "$target" && continue
		if ! is_deadline_flake; then
			echo "fuzz: $pkg $target failed" >&2
			exit 1
		fi
		echo "== $pkg $target: the fuzzing coordinator's deadline race (golang/go#75804), no input written; once more"
		run "$pkg" "$target" && continue
		if ! is_deadline_flake; then
			echo "fuzz: $pkg $target failed" >&2
			exit 1
		fi
		echo "fuzz: $pkg $target: the deadline race twice, no input written: not a finding" >&2
		flakes=$((flakes + 1))
	done < <(grep -hoE '^func (Fuzz[A-Za-z0-9_]+)' "$dir"/*_test.go 2>/dev/null | sed 's/func //')
done
echo "fuzz: every target ran; deadline races without a finding: $flakes"
