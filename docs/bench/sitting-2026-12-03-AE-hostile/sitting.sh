#!/bin/bash
# Sitting AE (2026-12-03): flood control on by default. Three parts of five interleaved rounds of
# docs/bench/sitting-2026-12-03-chat/sitting.sh, each one hold of cpu-exclusive (about 3 minutes):
# `before` = cmd/chat-load built at 872dfff (main when the change started: flood control off by default),
# `after` = the change with its defaults, bare-sqlite and bare; part 3 adds `off` (the change, -command-rate -1)
# flat out and drops bare.
#
#   git archive 872dfff | tar -x -C /tmp/before && (cd /tmp/before && go build -o /tmp/chat-load-before ./cmd/chat-load)
#   go build -o /tmp/chat-load ./cmd/chat-load
#   docs/bench/sitting-2026-12-03-AE-hostile/sitting.sh            # OUT=/tmp/ae by default
#   docs/bench/sitting-2026-12-03-chat/summarize.py /tmp/ae
B=${CHAT_LOAD:-/tmp/chat-load}
C=${CHAT_LOAD_BEFORE:-/tmp/chat-load-before}
S=$(dirname "$0")/../sitting-2026-12-03-chat/sitting.sh
export OUT=${OUT:-/tmp/ae}
part() { FIRST=$1 ROUNDS=5 RATE_ARMS="$2" HOSTILE_ARMS="before=$C:gotp after=$B:gotp" FLAT_ARMS="$3" /work/bin/cpu-exclusive "$S"; }
part 1 "before=$C:gotp after=$B:gotp bare-sqlite=$B:bare-sqlite bare=$B:bare" "before=$C:gotp after=$B:gotp bare-sqlite=$B:bare-sqlite"
part 6 "before=$C:gotp after=$B:gotp bare-sqlite=$B:bare-sqlite bare=$B:bare" "before=$C:gotp after=$B:gotp bare-sqlite=$B:bare-sqlite"
part 11 "before=$C:gotp after=$B:gotp bare-sqlite=$B:bare-sqlite" "before=$C:gotp after=$B:gotp off=$B:gotp:-command-rate,-1 bare-sqlite=$B:bare-sqlite"
