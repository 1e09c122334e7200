#!/bin/bash
# H1 hostile-mix sitting (sitting U, second part; the script of sitting N): the rate phase (2,000 msg/s, no flooders; gotp and bare-sqlite) and the
# hostile mix (the same + 10 flooders pipelining WHO, reading 64 KiB/s) with the new 64 KiB socket send buffer and,
# for comparison in the same sitting, with the kernel's autotuned one (-send-buffer -1); three interleaved rounds.
# go build -o /tmp/chat-load ./cmd/chat-load first
B=${CHAT_LOAD:-/tmp/chat-load}
O=${OUT:-/tmp/chat-sitting-hostile}
R=${ROUNDS:-3}
mkdir -p $O
{ date -u; uptime; } > $O/log.txt
for r in $(seq 1 $R); do
  for s in bare-sqlite gotp; do $B -server $s -messages 10 -rate 2000 > $O/rate-$s-$r.txt 2>&1; done
  $B -server gotp -messages 10 -rate 2000 -flood 10 > $O/hostile-$r.txt 2>&1
  $B -server gotp -messages 10 -rate 2000 -flood 10 -send-buffer -1 > $O/hostile-autotuned-$r.txt 2>&1
done
{ date -u; uptime; } >> $O/log.txt
