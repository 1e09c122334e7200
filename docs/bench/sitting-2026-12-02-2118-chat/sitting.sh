#!/bin/bash
# H1 sitting (sitting U; the script of sitting I): gotp and the bare Go baseline with the same SQLite history (bare-sqlite), interleaved,
# five rounds; then 10,000 idle connections. Servers listen on loopback ports the OS picks.
# go build -o /tmp/chat-load ./cmd/chat-load first
B=${CHAT_LOAD:-/tmp/chat-load}
O=${OUT:-/tmp/chat-sitting}
R=${ROUNDS:-5}
mkdir -p $O
{ date -u; uptime; } > $O/log.txt
for r in $(seq 1 $R); do
  for s in gotp bare-sqlite; do $B -server $s -messages 50 > $O/flat-$s-$r.txt 2>&1; done
  for s in bare-sqlite gotp; do $B -server $s -messages 10 -rate 2000 > $O/rate-$s-$r.txt 2>&1; done
  $B -server gotp -messages 10 -rate 2000 -flood 10 > $O/hostile-$r.txt 2>&1
done
$B -server gotp -users 10000 -messages 0 > $O/idle-tcp.txt 2>&1
$B -server gotp -users 10000 -ws 10000 -messages 0 > $O/idle-ws.txt 2>&1
$B -server gotp -users 10000 -ws 5000 -messages 0 > $O/idle-mixed.txt 2>&1
{ date -u; uptime; } >> $O/log.txt
