#!/usr/bin/env bash
# Builds dist/esm and dist/cjs; the work is in build.mjs (plain Node, so that
# `prepare` runs without a shell). Kept for callers that run this script.
set -euo pipefail
exec node "$(dirname "$0")/build.mjs"
