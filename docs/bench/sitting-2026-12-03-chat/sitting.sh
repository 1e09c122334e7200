#!/bin/bash
# H1 sitting, one script for every part (sittings X and Y, 2026-12-03): arms of the rate phase
# (2,000 msg/s offered), the hostile mix (the same + 10 flooders) and the closed loop, interleaved,
# their order rotated from round to round. An arm is name=binary:server[:extra,flags], binary a build of
# cmd/chat-load (so gotp arms may be builds of different commits: the code under test and a control).
#
#   go build -o /tmp/chat-load ./cmd/chat-load              # the code under test
#   git -C <control checkout> ... go build -o /tmp/chat-load-control ./cmd/chat-load
#   OUT=/tmp/sit FIRST=1 ROUNDS=4 docs/bench/sitting-2026-12-03-chat/sitting.sh
#   OUT=/tmp/sit FIRST=5 ROUNDS=4 docs/bench/sitting-2026-12-03-chat/sitting.sh   # a second part, under its own lock
#   docs/bench/sitting-2026-12-03-chat/summarize.py /tmp/sit
#
# IDLE=1: then 10,000 idle connections over TCP and over the WebSocket (binary $CHAT_LOAD, server gotp).
# Defaults: RATE arms bare-sqlite, gotp, control, bare; HOSTILE arms gotp, control; FLAT arms gotp, control, bare-sqlite.
B=${CHAT_LOAD:-/tmp/chat-load}
C=${CHAT_LOAD_CONTROL:-/tmp/chat-load-control}
O=${OUT:-/tmp/chat-sitting}
FIRST=${FIRST:-1}
ROUNDS=${ROUNDS:-4}
MSGS=${MSGS:-10}
RATE_ARMS=${RATE_ARMS-"bare-sqlite=$B:bare-sqlite gotp=$B:gotp control=$C:gotp bare=$B:bare"}
HOSTILE_ARMS=${HOSTILE_ARMS-"gotp=$B:gotp control=$C:gotp"}
FLAT_ARMS=${FLAT_ARMS-"gotp=$B:gotp control=$C:gotp bare-sqlite=$B:bare-sqlite"}
# An empty list skips its phase (FLAT_ARMS= ...).
mkdir -p $O
{ echo "part: rounds $FIRST..$((FIRST+ROUNDS-1))"; date -u; uptime; } >> $O/log.txt
rotate() { # rotate the words of $2 left by $1
  local a=($2) n k; n=${#a[@]}; [ $n -gt 0 ] || return 0; k=$(( $1 % n ))
  echo "${a[@]:$k} ${a[@]:0:$k}"
}
run() { # phase round arm-spec extra-args...
  local phase=$1 r=$2 spec=$3; shift 3
  local name=${spec%%=*} rest=${spec#*=}
  local bin=${rest%%:*} srv=${rest#*:} more=
  case $srv in *:*) more=${srv#*:}; srv=${srv%%:*};; esac # name=binary:server:extra,flags
  $bin -server $srv "$@" ${more//,/ } > $O/$phase-$name-$r.txt 2>&1
}
for r in $(seq $FIRST $((FIRST+ROUNDS-1))); do
  for a in $(rotate $r "$FLAT_ARMS"); do run flat $r $a -messages 50; done
  for a in $(rotate $r "$RATE_ARMS"); do run rate $r $a -messages $MSGS -rate 2000; done
  for a in $(rotate $r "$HOSTILE_ARMS"); do run hostile $r $a -messages $MSGS -rate 2000 -flood 10; done
done
if [ -n "$IDLE" ]; then # 10,000 idle connections (bytes per connection), TCP and WebSocket
  $B -server gotp -users 10000 -messages 0 > $O/idle-tcp.txt 2>&1
  $B -server gotp -users 10000 -ws 10000 -messages 0 > $O/idle-ws.txt 2>&1
fi
{ date -u; uptime; } >> $O/log.txt
