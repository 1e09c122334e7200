#!/bin/bash
# Q2 Postgres A/B, before f9fe955 / after 9fab6eb, 6 interleaved rounds.
O=/tmp/i23lim/sitting2
for r in 1 2 3 4 5 6; do
  if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for v in $order; do
    (cd $O/$v-src/bench && $O/$v.bench.test -test.run '^$' -test.bench 'Q2Drain/db=postgres/sys=gotp$' -test.benchtime 1x 2>&1 | grep jobs/s | sed "s/^/$v $r /")
  done
done
