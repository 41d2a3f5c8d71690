#!/usr/bin/env bash
# Builds the Apple framework of go/mobile with gomobile bind:
#   mobile/build/ios/Monolock.xcframework   (Swift: import Monolock)
# Needs macOS with Xcode (xcrun) and a Go toolchain. IOS_TARGETS sets the
# gomobile targets (default ios,iossimulator; "apple" adds macOS and Mac
# Catalyst).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

step "check for macOS and Xcode"
[[ "$(uname -s)" == Darwin ]] ||
	die "an XCFramework can only be built on macOS with Xcode (this is $(uname -s)); use mobile/scripts/jvm.sh to test the binding here"
need xcrun "Install Xcode and its command-line tools (xcode-select --install)."
xcrun --sdk iphoneos --show-sdk-path >/dev/null 2>&1 ||
	die "xcrun finds no iphoneos SDK: install Xcode (not only the command-line tools) and run xcode-select -s /Applications/Xcode.app"

step "build gomobile and gobind"
gomobile_tools

out="$build_dir/ios"
step "gomobile bind -target=${IOS_TARGETS:-ios,iossimulator} -> $out/Monolock.xcframework"
rm -rf "$out"
mkdir -p "$out"
(cd "$bind_module_dir" && gomobile bind -v -target="${IOS_TARGETS:-ios,iossimulator}" \
	-o "$out/Monolock.xcframework" "$bind_pkg") || die "gomobile bind for Apple targets failed (see above)"
[[ -f "$out/Monolock.xcframework/Info.plist" ]] || die "no Monolock.xcframework/Info.plist was written"
echo "built $out/Monolock.xcframework" >&2
