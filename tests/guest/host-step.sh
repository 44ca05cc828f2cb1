#!/bin/sh
# Runs in a guest: host-step.sh STEP asks the host for STEP (/job/STEP.request in the job
# directory the host shares) and waits up to 60 s for the host to say it is done
# (/job/STEP.done). Prints "STEP done", or why not and exits 1.
step=$1
touch "/job/$step.request"
n=0
until [ -f "/job/$step.done" ] || [ $n -ge 300 ]; do
	n=$((n + 1))
	sleep 0.2
done
if [ -f "/job/$step.done" ]; then
	echo "$step done"
else
	echo "the host did not do $step within 60 s"
	exit 1
fi
