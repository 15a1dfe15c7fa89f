#!/bin/sh
# The status command of profiles/cluster-generic: one word for the job id that submit.sh printed (the only
# argument): "success" or "failed" once the job has written its exit status (0 or not), "running" before,
# and "failed" for a job whose process is gone without writing one (killed).
set -eu
job=logs/cluster/$1
alive=yes # until its process is seen gone (a job not started yet has no .pid)
if [ -f "$job.pid" ] && ! kill -0 "$(cat "$job.pid")" 2>/dev/null; then
    alive=no # seen before reading the status: a job writes it before its process ends
fi
if [ -f "$job.exit" ]; then
    if [ "$(cat "$job.exit")" = 0 ]; then echo success; else echo failed; fi
elif [ "$alive" = yes ]; then
    echo running
else
    echo failed
fi
