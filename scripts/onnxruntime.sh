#!/usr/bin/env bash
# ONNX Runtime's shared library for Virga's inference engine (internal/serve/runtime/onnx), installed once and
# cached: npm's onnxruntime-node@1.30.0 ships libonnxruntime.so.1 (CPU, linked to glibc and libstdc++ only).
# Its install script is skipped (it downloads GPU providers from a host that may be unreachable).
#   scripts/onnxruntime.sh            install if missing, print the library's path
#   scripts/onnxruntime.sh path       print the path where it is (or would be) installed
#   scripts/onnxruntime.sh status     exit 0 if installed (and print its path), 1 if not
# The engine finds the library from VIRGA_ONNXRUNTIME, then this location:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/virga/onnxruntime-1.30.0/libonnxruntime.so.1
set -euo pipefail

version=1.30.0
dir="${XDG_CACHE_HOME:-$HOME/.cache}/virga/onnxruntime-$version"
lib="$dir/libonnxruntime.so.1"

case "${1:-install}" in
path)
  echo "$lib"
  exit 0
  ;;
status)
  if [ -s "$lib" ]; then
    echo "$lib"
    exit 0
  fi
  echo "ONNX Runtime $version is not installed at $lib (run scripts/onnxruntime.sh)" >&2
  exit 1
  ;;
install) ;;
*)
  echo "usage: $0 [install|path|status]" >&2
  exit 2
  ;;
esac

if [ -s "$lib" ]; then
  echo "$lib"
  exit 0
fi
if [ "$(uname -s)/$(uname -m)" != Linux/x86_64 ]; then
  echo "scripts/onnxruntime.sh installs the Linux x86-64 library only; this is $(uname -s)/$(uname -m)" >&2
  exit 1
fi
command -v npm >/dev/null 2>&1 || {
  echo "== installing npm"
  # shellcheck source=scripts/apt.sh
  source "$(dirname "$0")/apt.sh"
  apt_install npm
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== npm install --ignore-scripts onnxruntime-node@$version (into $work)" >&2
(cd "$work" && npm install --silent --no-audit --no-fund --ignore-scripts "onnxruntime-node@$version" >&2)
src="$work/node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1"
[ -s "$src" ] || {
  echo "onnxruntime-node@$version has no $src" >&2
  exit 1
}
mkdir -p "$dir"
# Copy then rename, so a concurrent run or an interrupted one never leaves a partial library at $lib.
cp "$src" "$lib.tmp.$$"

mv -f "$lib.tmp.$$" "$lib"
echo "$lib"
