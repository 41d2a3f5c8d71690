#!/usr/bin/env bash
# Builds the gomobile Java binding of go/mobile for the desktop JVM and runs
# its tests, without an Android SDK:
#
#   gobind -lang=go,java  ->  Java sources + the cgo glue (made for Android)
#   glue, adapted         ->  libgojni.so (linux c-shared, JDK's JNI headers)
#   javac                 ->  generated classes + stubs + tests + driver
#   java                  ->  mobile/java/jvmtest tests against the real server
#
# Usage: mobile/scripts/jvm.sh [build]   (default: build, then test)
#
# The Android glue needs a few adaptations on a desktop JVM. Each one checks
# that what it works around is still there and stops the build when it is
# not, so a newer x/mobile cannot silently change what we test.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

gobind_out="$build_dir/gobind"
gobind_objc_out="$build_dir/gobind-objc"
stub_lib_dir="$build_dir/stubs"

check_tools() {
	step "check tools"
	need go "Install Go (see go/go.mod for the version)."
	need "${CC:-gcc}" "cgo needs a C compiler (apt-get install gcc), or set CC."
	find_jdk
	find_libjsig
	echo "go: $(go version)  jdk: $java_home  cc: ${CC:-gcc}" >&2
}

# gobind writes Java proxies (java/) and the cgo glue (src/gobind/). It runs
# as the tool pinned in go/go.mod.
run_gobind() {
	step "gobind -lang=go,java (and objc) $bind_pkg"
	rm -rf "$gobind_out"
	(cd "$bind_module_dir" && go tool gobind -lang=go,java -outdir "$gobind_out" "$bind_pkg") ||
		die "gobind failed (is the tool directive for golang.org/x/mobile/cmd/gobind in mobile/go.mod?)"
	[[ -f "$gobind_out/java/go/Seq.java" && -f "$gobind_out/src/gobind/seq.go" ]] ||
		die "gobind output lacks java/go/Seq.java or src/gobind/seq.go; its layout changed"
	# gobind leaves out, with a comment, what it cannot export: every
	# exported name of go/mobile must make it into the binding.
	if grep -rn "skipped" "$gobind_out/java" "$gobind_out/src/gobind"/*.go; then
		die "gobind skipped part of the API above (a type gomobile cannot export)"
	fi
	# The Objective-C header too (generating it needs no Mac): the tests
	# check docs/mobile.md's Swift snippets against it.
	rm -rf "$gobind_objc_out"
	(cd "$bind_module_dir" && go tool gobind -lang=objc -outdir "$gobind_objc_out" "$bind_pkg") ||
		die "gobind -lang=objc failed"
	[[ -f "$gobind_objc_out/src/gobind/Monolock.objc.h" ]] || die "gobind -lang=objc wrote no Monolock.objc.h"
	if grep -n "skipped" "$gobind_objc_out/src/gobind/Monolock.objc.h"; then
		die "gobind skipped part of the API in Objective-C (see above)"
	fi
}

# expect FILE PATTERN WHAT: stop unless FILE contains PATTERN (fixed string).
expect() {
	grep -qF -- "$2" "$1" || die "$(basename "$1") no longer contains '$2': $3. Revisit this step for the new x/mobile."
}

# adapt_glue copies the generated cgo package into the Go module and adapts
# it to a linux JVM.
adapt_glue() {
	step "adapt the Android glue to linux"
	local src="$gobind_out/src/gobind"
	rm -rf "$jni_pkg_dir"
	mkdir -p "$jni_pkg_dir"
	cp "$src"/*.go "$src"/*.c "$src"/*.h "$jni_pkg_dir/"

	# 1. Files named *_android.go / *_android.c build only for GOOS=android.
	local renamed=0 f
	for f in "$jni_pkg_dir"/*_android.go "$jni_pkg_dir"/*_android.c; do
		[[ -e "$f" ]] || continue
		mv "$f" "${f%_android.*}_jni.${f##*.}"
		renamed=$((renamed + 1))
	done
	[[ -f "$jni_pkg_dir/seq_jni.go" && -f "$jni_pkg_dir/seq_jni.c" ]] ||
		die "gobind no longer writes seq_android.go and seq_android.c (renamed $renamed files)"
	if grep -l '^//go:build' "$jni_pkg_dir"/*.go >/dev/null 2>&1; then
		die "generated Go files now carry //go:build lines ($(grep -l '^//go:build' "$jni_pkg_dir"/*.go | xargs -n1 basename | tr '\n' ' ')); renaming is no longer enough"
	fi

	# 2. seq.h picks the Android headers only under __GOBIND_ANDROID__, which
	#    seq.go defines for GOOS=android; we pass it in CGO_CFLAGS.
	expect "$jni_pkg_dir/seq.go" '#cgo android CFLAGS: -D__GOBIND_ANDROID__' "the define is set differently"
	expect "$jni_pkg_dir/seq.h" '#ifdef __GOBIND_ANDROID__' "the headers select the platform differently"

	# 3. <android/log.h> and -llog: stubbed (stubs/c), see build_stubs.
	expect "$jni_pkg_dir/seq_android.h" '#include <android/log.h>' "the glue no longer logs through Android's log.h"
	expect "$jni_pkg_dir/seq_jni.go" '#cgo LDFLAGS: -llog' "the glue no longer links liblog"

	# 4. OpenJDK's jni.h declares AttachCurrentThread(JavaVM*, void**, void*),
	#    Android's (JavaVM*, JNIEnv**, void*): with -Werror the call does not
	#    compile. We also attach Go threads as daemons: a thread the JVM thinks
	#    is a user thread (Go never detaches its threads) keeps it from exiting.
	local from='(*jvm)->AttachCurrentThread(jvm, &env, NULL)'
	local to='(*jvm)->AttachCurrentThreadAsDaemon(jvm, (void **)\&env, NULL)'
	[[ $(grep -cF -- "$from" "$jni_pkg_dir/seq_jni.c") == 1 ]] ||
		die "seq_android.c no longer has exactly one '$from'"
	sed -i "s|(\*jvm)->AttachCurrentThread(jvm, &env, NULL)|$to|" "$jni_pkg_dir/seq_jni.c"
	expect "$jni_pkg_dir/seq_jni.c" 'AttachCurrentThreadAsDaemon(jvm, (void **)&env, NULL)' "the patch did not apply"
	expect "$jni_pkg_dir/seq_jni.go" '#cgo CFLAGS: -Werror' "the glue no longer builds with -Werror (the type fix may be unneeded)"

	# Keep gofmt -l quiet on the Go tree: x/mobile's support files are not
	# gofmt-clean.
	"$(go env GOROOT)/bin/gofmt" -w "$jni_pkg_dir" || die "gofmt failed on the copied glue"

	# 5. go/Seq.java imports android.content.Context: stubbed (stubs/java).
	expect "$gobind_out/java/go/Seq.java" 'import android.content.Context;' "Seq.java no longer needs the Context stub"
}

# build_stubs compiles the liblog stand-in as a static archive, so -llog
# resolves at link time and nothing extra is needed at run time.
build_stubs() {
	step "build the liblog stub"
	rm -rf "$stub_lib_dir"
	mkdir -p "$stub_lib_dir"
	"${CC:-gcc}" -c -fPIC -O2 -Wall -Werror -I"$mobile_dir/stubs/c" \
		-o "$stub_lib_dir/liblog.o" "$mobile_dir/stubs/c/liblog.c" || die "cannot compile stubs/c/liblog.c"
	ar rcs "$stub_lib_dir/liblog.a" "$stub_lib_dir/liblog.o" || die "ar failed"
}

build_shared() {
	step "go build -buildmode=c-shared -> build/lib/libgojni.so"
	mkdir -p "$build_dir/lib"
	(cd "$bind_module_dir" &&
		CGO_ENABLED=1 \
			CGO_CFLAGS="-O2 -g -D__GOBIND_ANDROID__ -I$java_home/include -I$java_home/include/linux -I$mobile_dir/stubs/c" \
			CGO_LDFLAGS="-L$stub_lib_dir" \
			go build -buildmode=c-shared -o "$build_dir/lib/libgojni.so" "./${jni_pkg_dir#"$bind_module_dir/"}") ||
		die "the c-shared build of the adapted glue failed (see the compiler output above)"
	rm -f "$build_dir/lib/libgojni.h"
	local symbols
	symbols=$(nm -D --defined-only "$build_dir/lib/libgojni.so") || die "nm cannot read libgojni.so"
	grep -q ' Java_go_Seq_init$' <<<"$symbols" || die "libgojni.so does not export Java_go_Seq_init"
}

compile_java() {
	step "javac: generated binding, stubs, tests, driver"
	rm -rf "$build_dir/classes"
	mkdir -p "$build_dir/classes"
	local sources="$build_dir/java-sources.txt"
	find "$gobind_out/java" "$mobile_dir/stubs/java" "$mobile_dir/java" -name '*.java' | sort >"$sources"
	"$javac_bin" -encoding UTF-8 -Xlint:all,-serial,-rawtypes,-unchecked -Werror --release 17 \
		-d "$build_dir/classes" @"$sources" || die "javac failed"
}

run_tests() {
	step "run the binding tests on the JVM"
	monolock_bin
	java_run -Dmonolock.spec="$repo_dir/spec" -Dmonolock.docs="$repo_dir/docs/mobile.md" \
		-Dmonolock.java="$gobind_out/java/monolock" -Dmonolock.objc="$gobind_objc_out/src/gobind/Monolock.objc.h" \
		jvmtest.Main || die "binding tests failed"
}

mode=${1:-all}
case "$mode" in
build | all) ;;
*) die "usage: jvm.sh [build]   (got '$mode')" ;;
esac

check_tools
run_gobind
adapt_glue
build_stubs
build_shared
compile_java
if [[ $mode == all ]]; then
	run_tests
fi
printf '\nmobile: done (jvm.sh %s)\n' "$mode" >&2
