#!/usr/bin/env bash
# Starts the Java conformance driver (mobile/java/conformance_driver) over
# the gomobile binding built by `jvm.sh build`. The conformance runner starts
# one per scenario; it speaks JSON lines on stdin/stdout.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
find_jdk
find_libjsig
[[ -f "$build_dir/lib/libgojni.so" && -d "$build_dir/classes/conformance_driver" ]] ||
	die "the binding is not built; run mobile/scripts/jvm.sh build first"
exec env LD_PRELOAD="$libjsig${LD_PRELOAD:+:$LD_PRELOAD}" \
	"$java_bin" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \
	-Djava.library.path="$build_dir/lib" -cp "$build_dir/classes" conformance_driver.Driver
