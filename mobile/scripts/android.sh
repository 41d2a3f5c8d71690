#!/usr/bin/env bash
# Builds the Android library (AAR) of go/mobile with gomobile bind:
#   mobile/build/android/monolock.aar          (classes.jar + libgojni.so per ABI)
#   mobile/build/android/monolock-sources.jar
# Needs the Android SDK (ANDROID_HOME or ANDROID_SDK_ROOT, or ~/Android/Sdk)
# with an NDK (ANDROID_NDK_HOME, or an ndk/<version> inside the SDK), and a
# JDK. ANDROID_API sets the minimum API level (default 21).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

step "check the Android SDK and NDK"
sdk=${ANDROID_HOME:-${ANDROID_SDK_ROOT:-}}
if [[ -z "$sdk" ]]; then
	for guess in "$HOME/Android/Sdk" "$HOME/Library/Android/sdk"; do
		[[ -d "$guess" ]] && sdk=$guess && break
	done
fi
[[ -n "$sdk" && -d "$sdk" ]] ||
	die "no Android SDK found. Install it (Android Studio, or the command-line tools + sdkmanager \"platforms;android-34\" \"ndk;26.3.11579264\") and set ANDROID_HOME."
export ANDROID_HOME=$sdk
if [[ -n "${ANDROID_NDK_HOME:-}" ]]; then
	[[ -d "$ANDROID_NDK_HOME" ]] || die "ANDROID_NDK_HOME=$ANDROID_NDK_HOME does not exist"
elif ! compgen -G "$sdk/ndk/*/source.properties" >/dev/null && [[ ! -d "$sdk/ndk-bundle" ]]; then
	die "no NDK in $sdk (looked for ndk/<version>/ and ndk-bundle/). Install one: sdkmanager \"ndk;26.3.11579264\", or set ANDROID_NDK_HOME."
fi
find_jdk
need unzip "Install unzip (used to check the AAR)."

step "build gomobile and gobind"
gomobile_tools

out="$build_dir/android"
step "gomobile bind -target=android -> $out/monolock.aar"
rm -rf "$out"
mkdir -p "$out"
(cd "$bind_module_dir" && gomobile bind -v -target=android -androidapi "${ANDROID_API:-21}" \
	-o "$out/monolock.aar" "$bind_pkg") || die "gomobile bind -target=android failed (see above)"

step "check the AAR"
listing=$(unzip -l "$out/monolock.aar") || die "monolock.aar is not a zip archive"
grep -q 'classes.jar' <<<"$listing" || die "monolock.aar has no classes.jar"
grep -q 'jni/arm64-v8a/libgojni.so' <<<"$listing" || die "monolock.aar has no arm64-v8a libgojni.so"
echo "built $out/monolock.aar" >&2
