#!/bin/sh
# The kernel smoke suite, run inside a guest kernel (`cargo xtask test
# --kernels`): $1 is the read-write output directory, $2 the stoke binary,
# $3 the directory of the compiled workloads, $4 the JDK, $5 the Python
# 70:30 workload (run by Debian's python3.11: the host's root is the
# guest's). Every check leaves NAME.rc (stoke's exit code), NAME.folded and
# NAME.log in $1; the host asserts on them, as the guest's stdout may not
# reach it.
out=$1 stoke=$2 work=$3 jdk=$4 python_split=$5
uname -r > "$out/kernel"
cd "$out" || exit 1

# Waits up to 60 s for "ready" in file $1 (a workload's output).
wait_ready() {
	for _ in $(seq 600); do
		grep -q ready "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# check NAME ARGS...: stoke record ARGS, its exit code, output and seconds.
check() {
	name=$1
	shift
	start=$(date +%s.%N)
	"$stoke" record --format folded -o "$out/$name.folded" "$@" > "$out/$name.log" 2>&1
	echo $? > "$out/$name.rc"
	echo "$start $(date +%s.%N)" > "$out/$name.time"
}

"$work/fp_split" 60 > split.out 2>&1 &
split=$!
wait_ready split.out
check record_a -a -d 3
check record_p -p "$split" -d 4
# A second burner on the guest's one CPU: each waits about half the time.
"$work/fp_split" 60 > rival.out 2>&1 &
rival=$!
wait_ready rival.out
check runqueue -p "$split" -e runqueue -d 3
kill "$split" "$rival"

"$work/read_loop" 60 "$out/read_loop.data" > read.out 2>&1 &
reader=$!
wait_ready read.out
check kernel_frames -p "$reader" -d 3
kill "$reader"
rm -f "$out/read_loop.data"

"$work/page_faults" 60 > faults.out 2>&1 &
faults=$!
wait_ready faults.out
check counters -p "$faults" -e page-faults --period 1 -d 3
check kprobe -p "$faults" -e kprobe:handle_mm_fault -d 3
check tracepoint -p "$faults" -e exceptions:page_fault_user -d 3
kill "$faults"

sleep 60 &
sleeper=$!
check offcpu -p "$sleeper" -e offcpu -d 3
check wall -p "$sleeper" -e wall -d 3
kill "$sleeper"

"$work/deep_recursion" 100 60 1 > deep.out 2>&1 &
deep=$!
wait_ready deep.out
check deep -p "$deep" -d 3
kill "$deep"

/usr/bin/python3.11 "$python_split" 60 > python.out 2>&1 &
py=$!
wait_ready python.out
check python -p "$py" -d 4
kill "$py"

"$jdk/bin/java" -XX:+UseSerialGC -Xmx64m -cp "$work" JavaSplit 120 > java.out 2>&1 &
java=$!
wait_ready java.out
check java -p "$java" -d 4
kill "$java"
wait
echo done > "$out/done"
