#!/bin/sh
# Runs Q1-Q3 for gotp and River, N interleaved rounds (default 3), each round one
# pass of every benchmark, and prints the raw lines; summarize with
#   grep -h Benchmark out/round*.txt | sort
# Needs POSTGRES_TEST_URL for the Postgres half (skipped without it).
set -e
cd "$(dirname "$0")"
n=${1:-3}
mkdir -p out
for i in $(seq 1 "$n"); do
	go test -run '^$' -bench 'Q1|Q2|Q3' -benchtime=1x -count=1 -timeout 30m . | tee "out/round$i.txt"
done
