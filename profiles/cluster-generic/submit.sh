#!/bin/sh
# The submit command of profiles/cluster-generic: a stand-in for a batch system's (sbatch, qsub) on this one
# machine. Snakemake calls it with a job script (the last argument, under .snakemake/); the script runs as a
# separate background process in a session of its own, sharing nothing with Snakemake but the file system, as
# on a cluster's node. Prints the job's id (Snakemake passes it to status.sh) and appends "ID SCRIPT" to
# logs/cluster/submitted.log. In logs/cluster/: the job's output in ID, its process id in ID.pid, its exit
# status in ID.exit.
set -eu
for jobscript; do :; done # the last argument
dir=logs/cluster
mkdir -p "$dir"
out=$(mktemp "$dir/job-XXXXXXXX") # a new file, unique: the job's output, its name the job's id
id=${out##*/}
detach=
if command -v setsid >/dev/null 2>&1; then
    detach=setsid
fi
# The job starts from an empty environment but HOME and a system PATH, as a batch job on a node would without
# exporting the submitter's: Snakemake's job script names its interpreter and the PATH the Snakefile declares.
# Its process id and exit status are written under temporary names and renamed: status.sh never reads half.
$detach env -i HOME="$HOME" PATH=/usr/bin:/bin sh -c '
    echo $$ >"$2.pid.part" && mv "$2.pid.part" "$2.pid"
    sh "$1" >"$2" 2>&1
    echo $? >"$2.exit.part" && mv "$2.exit.part" "$2.exit"' \
    job "$jobscript" "$dir/$id" </dev/null >/dev/null 2>&1 &
echo "$id ${jobscript##*/}" >>"$dir/submitted.log"
echo "$id"
