#!/usr/bin/env bash
# Start or stop a JACK server on the dummy driver: a real audio clock without a sound card.
#
#   scripts/jack_dummy.sh start [NAME] [RATE] [PERIOD]   # default: bendserver 48000 256
#   scripts/jack_dummy.sh stop  [NAME]
#   scripts/jack_dummy.sh status [NAME]
#
# Then: JACK_DEFAULT_SERVER=NAME bendserver serve --audio jack ...
# The server's output and pid go to ${TMPDIR:-/tmp}/jack_dummy_NAME.{log,pid}.
set -euo pipefail

action=${1:-}
name=${2:-bendserver}
rate=${3:-48000}
period=${4:-256}
state=${TMPDIR:-/tmp}/jack_dummy_${name}

need() {
    command -v "$1" >/dev/null 2>&1 || { echo "$1 is missing: apt-get install jackd2" >&2; exit 1; }
}

case "$action" in
start)
    need jackd
    need jack_wait
    if [ -f "$state.pid" ] && kill -0 "$(cat "$state.pid")" 2>/dev/null; then
        echo "JACK server '$name' already runs (pid $(cat "$state.pid"))"
        exit 0
    fi
    jackd -n "$name" -d dummy -r "$rate" -p "$period" >"$state.log" 2>&1 &
    echo $! >"$state.pid"
    if ! jack_wait -s "$name" -w -t 10 >/dev/null 2>&1; then
        echo "JACK server '$name' did not start; see $state.log" >&2
        exit 1
    fi
    echo "JACK server '$name' runs (dummy driver, $rate Hz, $period frames, pid $(cat "$state.pid"))"
    echo "use it with: JACK_DEFAULT_SERVER=$name bendserver serve --audio jack"
    ;;
stop)
    if [ -f "$state.pid" ]; then
        pid=$(cat "$state.pid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$state.pid"
        echo "JACK server '$name' stopped"
    else
        echo "no JACK server '$name' started by this script"
    fi
    ;;
status)
    if [ -f "$state.pid" ] && kill -0 "$(cat "$state.pid")" 2>/dev/null; then
        echo "JACK server '$name' runs (pid $(cat "$state.pid"))"
    else
        echo "JACK server '$name' is not running"
        exit 1
    fi
    ;;
*)
    echo "usage: $0 start|stop|status [NAME] [RATE] [PERIOD]" >&2
    exit 2
    ;;
esac
