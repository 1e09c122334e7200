#!/bin/bash
# Q1 batch publish on SQLite (gotp), one pass per commit per round, 3 rounds, order rotated.
cd /tmp/i23lim/q1
cs=(a5be1af cc56ba5 37ca004_1 37ca004 dfa178c)
for r in 1 2 3; do
  for i in "${!cs[@]}"; do
    c=${cs[$(( (i + r) % ${#cs[@]} ))]}
    (cd src-$c/bench && /tmp/i23lim/q1/$c.test -test.run '^$' -test.bench 'Q1BatchPublish/db=sqlite/sys=(gotp|river-InsertManyFast)$' -test.benchtime 1x 2>&1 | grep jobs/s | sed "s/^/$c $r /")
  done
done
