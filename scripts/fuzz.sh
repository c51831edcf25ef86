#!/usr/bin/env bash
# fuzz.sh GO FUZZTIME PKG:TARGET... runs each fuzz target for FUZZTIME
# (make fuzz, make fuzz-short), stopping at the first failure.
#
# Go 1.26's fuzzing coordinator can fail a target that found nothing, with a
# bare "context deadline exceeded" just past -fuzztime, when the machine is
# loaded (golang/go#75804, fixed in Go 1.27): the deadline of -fuzztime
# reaches its context before the workers' one, and it takes that for an
# error. A real failure always writes its input to testdata/fuzz ("Failing
# input written to"). So a run that failed with that message and wrote no
# input has its corpus replayed (seeds and testdata/fuzz, no fuzzing), and
# passes if the replay passes. Every other failure fails.
set -u
go=$1 fuzztime=$2
shift 2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "$@"; do
	pkg=${t%%:*} name=${t##*:}
	echo "$go test -run '^\$' -fuzz '^$name\$' -fuzztime $fuzztime $pkg"
	"$go" test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log"
	if [ "${PIPESTATUS[0]}" -eq 0 ]; then
		continue
	fi
	if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written to' "$log"; then
		echo "fuzz.sh: $name stopped at the end of -fuzztime with no failing input (Go's fuzzing coordinator, golang/go#75804); replaying its corpus"
		"$go" test -count=1 -run "^$name\$" "$pkg" || exit 1
		continue
	fi
	exit 1
done
