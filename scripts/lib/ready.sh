# The shell side of `monolock serve --ready-file` (docs/operating.md, "The
# ready file"): source it, start the server with --ready-file FILE, then
# wait_ready. It defines functions only. Scripts read the server's addresses
# from the file, never from its log.

# ready_field FILE NAME prints the string field NAME (lock_addr,
# admin_addr, version) of the ready file. The server writes the object on
# one line with Go's encoding/json, so a string field is "NAME":"VALUE".
ready_field() {
	sed -n "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p" "$1"
}

# wait_ready FILE PID LOG [SECONDS] waits (default 15 s) for the server PID
# to write its ready file FILE and prints its lock_addr. It fails, with the
# tail of the server's stderr LOG, if the server exits first or the time
# runs out.
wait_ready() {
	local file=$1 pid=$2 log=$3 tries=$((${4:-15} * 10))
	while ((tries-- > 0)); do
		# The server renames the file into place whole: once there, it is complete.
		if [[ -s $file ]]; then
			ready_field "$file" lock_addr
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "monolock serve (pid $pid) exited before it was ready; its stderr:" >&2
			tail -n 50 "$log" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "monolock serve (pid $pid) did not write $file within ${4:-15} s; its stderr:" >&2
	tail -n 50 "$log" >&2
	return 1
}
