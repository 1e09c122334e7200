#!/bin/bash
URL='postgres://postgres@127.0.0.1:5432/gotp_ac?sslmode=disable'
cd /tmp/i23fifo/sitting2/after-src/inbox
echo "select clock_timestamp()::time, coalesce(wait_event_type,'-'), coalesce(wait_event,'-'), left(regexp_replace(query,'\s+',' ','g'),50) from pg_stat_activity where datname='gotp_ac' and pid<>pg_backend_pid() and state='active' \watch 0.02" | psql -qAt "$URL" > /tmp/i23fifo/probe_act.txt 2>&1 &
pp=$!
POSTGRES_TEST_URL=$URL INBOX_BENCH_JOBS=10000 /tmp/i23fifo/sitting2/after.inbox.test -test.run '^$' -test.bench 'BenchmarkDrainGroups/postgres/(fifo100|plain)$' -test.count 2 -test.benchtime 1x > /tmp/i23fifo/probe_bench.txt 2>&1
kill $pp
