# Shared by the mobile scripts: paths, messages, tool discovery.
# Source it; it defines functions and variables only.

mobile_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
repo_dir=$(cd "$mobile_dir/.." && pwd)
go_dir="$repo_dir/go"
build_dir="$mobile_dir/build"
# The binding is built in its own Go module (mobile/go.mod), which pins
# golang.org/x/mobile as a tool and points at ../go with a replace: users of
# the Go client never inherit x/mobile or the Go version it needs.
bind_module_dir="$mobile_dir"
source "$repo_dir/scripts/lib/system-tools.sh"

# The Go package that gomobile binds, and where its JVM glue is compiled:
# the glue is a cgo main package, so it must live inside the binding's
# module; the leading underscore keeps it out of ./... patterns.
bind_pkg="github.com/monolock/monolock/go/mobile"
jni_pkg_dir="$bind_module_dir/build/_jni"

# step prints a headline for the next stage; die says which stage broke.
# "== " like the other test scripts: "==> " is for mage's top-level steps.
current_step="(start)"
step() {
	current_step="$*"
	printf '\n== mobile: %s\n' "$*" >&2
}
die() {
	printf '\nmobile: FAILED at step "%s":\n  %s\n' "$current_step" "$*" >&2
	exit 1
}

need() {
	command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH. $2"
}

# find_jdk sets java_home to a JDK with JNI headers and libjsig.so.
find_jdk() {
	if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/javac" ]]; then
		java_home=$JAVA_HOME
	else
		local javac
		javac=$(tool_path javac) || die "no JDK: install the one scripts/system-tools.tsv names (go run mage.go deps), or set JAVA_HOME to a JDK 17 or newer"
		java_home=$(dirname "$(dirname "$(readlink -f "$javac")")")
	fi
	[[ -f "$java_home/include/jni.h" ]] || die "no include/jni.h under $java_home: that is a JRE, not a JDK (set JAVA_HOME to a JDK)"
	java_bin="$java_home/bin/java"
	javac_bin="$java_home/bin/javac"
	[[ -x "$java_bin" ]] || die "no bin/java under $java_home"
}

# find_libjsig sets libjsig to the JDK's signal-chaining library. Preloading
# it lets the JVM keep its own signal handlers (it relies on SIGSEGV for null
# checks and safepoints) after the Go runtime installs handlers of its own.
find_libjsig() {
	libjsig=$(find "$java_home/lib" -name libjsig.so -print -quit 2>/dev/null || true)
	[[ -n "$libjsig" ]] || die "no libjsig.so under $java_home/lib; the Go runtime would take over the JVM's signal handlers"
}

# monolock_bin sets MONOLOCK_BIN to the server binary. Unset, it (re)builds
# bin/monolock; set (as mage does), it builds it only if it is missing.
monolock_bin() {
	local build=false
	[[ -z "${MONOLOCK_BIN:-}" ]] && build=true
	MONOLOCK_BIN=${MONOLOCK_BIN:-$repo_dir/bin/monolock}
	if $build || [[ ! -x "$MONOLOCK_BIN" ]]; then
		(cd "$go_dir" && go build -o "$MONOLOCK_BIN" ./cmd/monolock) ||
			die "could not build the monolock server into $MONOLOCK_BIN (go build ./cmd/monolock)"
	fi
	export MONOLOCK_BIN
}

# java_run runs the JVM with the binding on its library path.
java_run() {
	LD_PRELOAD="$libjsig${LD_PRELOAD:+:$LD_PRELOAD}" \
		"$java_bin" -Xss1m -XX:+UseSerialGC -Djava.library.path="$build_dir/lib" \
		-cp "$build_dir/classes" "$@"
}

# gomobile_tools builds gomobile and gobind at the versions pinned in
# go/go.mod into build/bin and puts them first on PATH (gomobile bind runs
# the gobind it finds on PATH).
gomobile_tools() {
	need go "Install Go (see go/go.mod for the version)."
	mkdir -p "$build_dir/bin"
	(cd "$bind_module_dir" &&
		go build -o "$build_dir/bin/gomobile" golang.org/x/mobile/cmd/gomobile &&
		go build -o "$build_dir/bin/gobind" golang.org/x/mobile/cmd/gobind) ||
		die "cannot build gomobile/gobind from the golang.org/x/mobile pinned in mobile/go.mod"
	PATH="$build_dir/bin:$PATH"
	export PATH
}
