#!/usr/bin/env bash
# Copies the third-party sources qwick builds against (fmt and nlohmann/json headers, googletest,
# PCRE2 and utf8proc headers with their static libraries)
# from this Debian machine into DIR, for a machine that has a compiler but cannot install packages
# (the GPU machine). tools/gpu_check.sh builds from such a bundle when QWICK_DEPS_SRC points at it.
#   tools/bundle_deps.sh DIR
set -euo pipefail
dir=${1:?usage: tools/bundle_deps.sh DIR}
rm -rf "$dir" && mkdir -p "$dir/include"
cp -r /usr/include/fmt /usr/include/nlohmann /usr/include/pcre2.h /usr/include/utf8proc.h "$dir/include/"
# Static archives, so the binaries need no extra shared libraries there.
mkdir -p "$dir/lib"
cp /usr/lib/x86_64-linux-gnu/libpcre2-8.a /usr/lib/x86_64-linux-gnu/libutf8proc.a "$dir/lib/"
cp -r /usr/src/googletest "$dir/googletest"
fmt_version=$(dpkg-query -W -f='${Version}' libfmt-dev | sed 's/[+~-].*//')
json_version=$(dpkg-query -W -f='${Version}' nlohmann-json3-dev | sed 's/[+~-].*//')
echo "$fmt_version $json_version" >"$dir/versions"
