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

# A container as runtimes make one: its own mount and pid namespaces, a
# root of its own (the workload and its libraries copied in), a cgroup
# named as docker names its scopes. Its id goes to container.id.
id=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
echo "$id" > container.id
root=$out/container
mkdir -p "$root/work"
cp "$work/fp_split" "$root/work/"
for lib in $(ldd "$work/fp_split" | grep -o '/[^ ]*'); do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done
grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup
scope=/sys/fs/cgroup/system.slice/docker-$id.scope
mkdir -p "$scope"
sh -c "echo \$\$ > $scope/cgroup.procs &&
	exec unshare --fork --pid --mount --kill-child chroot $root /work/fp_split 60" \
	> container.out 2>&1 &
contained=$!
wait_ready container.out
check container -a -F 199 -d 6
kill "$contained"

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
