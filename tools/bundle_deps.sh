#!/usr/bin/env bash
# Copies the third-party sources qwick builds against (fmt and nlohmann/json headers, googletest,
# PCRE2 and utf8proc headers with their static libraries, cpp-httplib) from this Debian machine
# into DIR, for a machine that has a compiler but cannot install packages (the GPU machine).
# tools/gpu_check.sh builds from such a bundle when QWICK_DEPS_SRC points at it.
#   tools/bundle_deps.sh DIR          e.g. .dev/deps (ignored by git), then carried to the machine
set -euo pipefail
dir=${1:?usage: tools/bundle_deps.sh DIR}
rm -rf "$dir" && mkdir -p "$dir/include"
cp -r /usr/include/fmt /usr/include/nlohmann /usr/include/pcre2.h /usr/include/utf8proc.h "$dir/include/"
# Static archives, so the binaries need no extra shared libraries there.
mkdir -p "$dir/lib"
cp /usr/lib/x86_64-linux-gnu/libpcre2-8.a /usr/lib/x86_64-linux-gnu/libutf8proc.a "$dir/lib/"
cp -r /usr/src/googletest "$dir/googletest"

# cpp-httplib: Debian's header declares the library compiled in libcpp-httplib.so, built with OpenSSL
# support: its classes have the TLS members, so every user compiles with CPPHTTPLIB_OPENSSL_SUPPORT
# and needs OpenSSL's headers. The library's own dependencies (OpenSSL, zlib, brotli) are the GPU
# machine's. Copied under the link name and the soname, no symbolic links.
lib=/usr/lib/x86_64-linux-gnu
cp /usr/include/httplib.h "$dir/include/"
cp -r /usr/include/openssl "$dir/include/"
cp /usr/include/x86_64-linux-gnu/openssl/* "$dir/include/openssl/"
cp -L "$lib/libcpp-httplib.so" "$dir/lib/libcpp-httplib.so"
cp -L "$lib/libcpp-httplib.so" "$dir/lib/$(objdump -p "$lib/libcpp-httplib.so" | awk '/SONAME/ { print $2 }')"
fmt_version=$(dpkg-query -W -f='${Version}' libfmt-dev | sed 's/[+~-].*//')
json_version=$(dpkg-query -W -f='${Version}' nlohmann-json3-dev | sed 's/[+~-].*//')
httplib_version=$(dpkg-query -W -f='${Version}' libcpp-httplib-dev | sed 's/[+~-].*//')
echo "$fmt_version $json_version $httplib_version" >"$dir/versions"
