#!/usr/bin/env bash
# Runs BenchmarkToolsCall's targets in turn, one process per target and round, and
# prints each target's median p50 and p99 over the rounds and its ratio to the bare
# reverse proxy of the same rounds.
#
# Why not one `go test -bench` run: on a small machine a target that runs late in a
# process that has run others is slower for that alone, and load from elsewhere comes
# and goes; taking turns, round after round, spreads both over every target alike.
#
#   hack/bench-toolscall.sh [-e ERA] [-c CLIENTS] [-r ROUNDS] [-n CALLS] [TARGET...]
#
# ERA is 2026-07-28 (default) or 2025-11-25; CLIENTS 1 (default) or 64; TARGETs default
# to direct bare-proxy gateway thv. Needs the environment `make test` sets (see the
# Makefile) and, for thv, hack/test-servers.sh --thv.
set -euo pipefail

era=2026-07-28 clients=1 rounds=5 calls=2000
while getopts "e:c:r:n:" opt; do
	case $opt in
	e) era=$OPTARG ;;
	c) clients=$OPTARG ;;
	r) rounds=$OPTARG ;;
	n) calls=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(direct bare-proxy gateway thv)

cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go test -c -o "$work/gateway.test" ./gateway/

for round in $(seq "$rounds"); do
	for target in "${targets[@]}"; do
		(cd gateway && "$work/gateway.test" -test.run '^$' \
			-test.bench "ToolsCall/era=$era/clients=$clients/$target\$" -test.benchtime "${calls}x") |
			awk -v t="$target" '/µs-p50/ { for (i = 1; i < NF; i++) { if ($(i+1) == "µs-p50") p50 = $i; if ($(i+1) == "µs-p99") p99 = $i } print t, p50, p99 }' \
				>>"$work/figures"
	done
	echo "round $round of $rounds done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done

echo "era=$era clients=$clients, $rounds rounds of $calls calls, median over rounds:"
for target in "${targets[@]}"; do
	awk -v t="$target" '$1 == t { print $2, $3 }' "$work/figures" >"$work/$target"
	[ -s "$work/$target" ] || { echo "$target: no figures (left out?)"; continue; }
	p50=$(cut -d' ' -f1 "$work/$target" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
	p99=$(cut -d' ' -f2 "$work/$target" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
	echo "$target $p50 $p99" >>"$work/medians"
done
awk 'BEGIN { printf "%-12s %10s %10s %12s\n", "target", "p50 µs", "p99 µs", "p50/bare" }
	{ t[NR] = $1; p50[NR] = $2; p99[NR] = $3; if ($1 == "bare-proxy") bare = $2 }
	END { for (i = 1; i <= NR; i++) printf "%-12s %10s %10s %12s\n", t[i], p50[i], p99[i], bare ? sprintf("%.2f", p50[i] / bare) : "-" }' "$work/medians"
